// Package protection keeps opted-in ConfigMaps and Secrets from being deleted while anything live
// uses them, the way kube-controller-manager's pvcprotection keeps PersistentVolumeClaims: every
// opted-in object carries the finalizer configmap-attacher.io/in-use-protection, so a deletion from any
// source (the garbage collector, Helm, kubectl, a deploy while this controller was down) only sets its
// deletionTimestamp; the finalizer comes off once no Pod and no pod template of any workload kind in
// its namespace references it. The kubelet keeps serving an object being deleted to volumes and env
// (see docs/controller.md), so holding it is enough.
//
// It also undoes what we wrote when an object is opted out: our finalizer and our ownerReferences.
package protection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Name names the controller in logs and metrics.
const Name = "protection"

// Reasons of the Events it records on config objects.
const (
	ReasonHeld     = "DeletionHeld"
	ReasonReleased = "DeletionReleased"
)

// Controller syncs config objects, keyed "Kind/namespace/name".
type Controller struct {
	caches     *caches.Caches
	finalizers Finalizers
	writer     *attach.Writer
	live       *liveChecks
	kube       kubernetes.Interface // namespaces: is this one terminating?
	events     record.EventRecorder
	loop       *reconcile.Loop
	now        func() time.Time // the clock of the oldest hold's age
}

// New wires the controller to its caches. live double-checks a cache that says "unused" (the objects
// of a namespace waiting at once share a look, liveChecks); events may be nil. Every heldResync (0: never) every held object is examined again, whatever events came.
func New(c *caches.Caches, writer *attach.Writer, live UserLister, kube kubernetes.Interface, events record.EventRecorder, m *metrics.Metrics,
	heldResync time.Duration) (*Controller, error) {
	var skipped func(caches.Kind, int)
	if m != nil {
		skipped = func(kind caches.Kind, n int) { m.LiveCheckSkipped(string(kind), n) }
		for _, kind := range []caches.Kind{caches.ControllerRevision, caches.Rollout} {
			skipped(kind, 0) // the series exist from the start
		}
	}
	ctl := &Controller{caches: c, finalizers: Finalizers{Client: writer.Client}, writer: writer, kube: kube, events: events, now: time.Now}
	ctl.live = newLiveChecks(live, ctl.heldIn, skipped)
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: ctl.sync, Metrics: m,
		Resync: ctl.resyncHeld, ResyncPeriod: heldResync}
	for kind, inf := range c.Configs {
		if err := inf.AddEventHandler(ctl.configHandler(kind)); err != nil {
			return nil, err
		}
	}
	for _, kind := range caches.UserKinds() {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandlerAfterFirstList(ctl.userHandler()); err != nil {
				return nil, err
			}
		}
	}
	if m != nil {
		m.Gauge("configmap_attacher_held_objects", "Opted-in objects being deleted but held by in-use protection.", func() float64 {
			n, _ := ctl.holds()
			return float64(n)
		})
		m.Gauge("configmap_attacher_held_oldest_age_seconds", "Age of the oldest deletion in-use protection holds (since its deletionTimestamp); 0 when none.",
			func() float64 { return ctl.oldestHoldAge().Seconds() })
		m.Gauge("configmap_attacher_protection_queue_depth", "Config keys waiting for the protection controller.", func() float64 { return float64(ctl.loop.Queue.Len()) })
	}
	return ctl, nil
}

// Loop is the controller's queue and workers.
func (c *Controller) Loop() *reconcile.Loop { return c.loop }

func configKey(kind refs.Kind, namespace, name string) string {
	return fmt.Sprintf("%s/%s/%s", kind, namespace, name)
}

func (c *Controller) configHandler(kind refs.Kind) cache.ResourceEventHandler {
	enqueueIf := func(obj any, when func(*metav1.PartialObjectMetadata) bool) {
		if m, ok := caches.MetaOf(obj); ok && when(m) {
			c.loop.Queue.Add(configKey(kind, m.Namespace, m.Name))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { enqueueIf(obj, needsLook) },
		UpdateFunc: func(_, cur any) { enqueueIf(cur, needsLook) },
		// Deleted, or opted out: a label-selected watch reports an object losing the label as deleted.
		DeleteFunc: func(obj any) {
			if m, ok := caches.MetaOf(obj); ok {
				c.live.drop(m.Namespace, configKey(kind, m.Namespace, m.Name))
			}
			enqueueIf(obj, always)
		},
	}
}

// userHandler re-examines the held objects a user could have been holding, when the user goes away
// or stops being live or referencing them (heldBy). An object of another uid under the same name is
// another object: the one before it went (deleted and created again while the watch was down, which a
// relist shows as an update), and with it what it held by its uid (a pinning snapshot it owned).
func (c *Controller) userHandler() cache.ResourceEventHandler {
	requeue := func(u *caches.User) {
		for _, key := range c.heldBy(u) {
			c.loop.Queue.Add(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			if o, ok := caches.UserOf(old); ok && o.Live() {
				if n, ok := caches.UserOf(cur); !ok || n.UID != o.UID || !n.Live() || !slices.Equal(n.Refs, o.Refs) {
					requeue(o)
				}
			}
		},
		DeleteFunc: func(obj any) {
			if u, ok := caches.UserOf(obj); ok {
				requeue(u)
			}
		},
	}
}

// heldBy returns the keys of the held objects u could be holding: those it references by name, and
// those that name it as an owner. A pinning snapshot's revisions are its users though their templates
// name the original object, not the snapshot; when the garbage collector's deletion of a pruned
// revision's snapshot reached us before the revision's own deletion, the snapshot was held for the
// revision and only the revision's deletion can let it go.
func (c *Controller) heldBy(u *caches.User) []string {
	var keys []string
	add := func(kind refs.Kind, m *metav1.PartialObjectMetadata) {
		if isHeld(m) {
			keys = append(keys, configKey(kind, m.Namespace, m.Name))
		}
	}
	for _, r := range u.Refs {
		if inf, ok := c.caches.Configs[r.Kind]; ok {
			if m, exists, _ := inf.Get(u.Namespace, r.Name); exists {
				add(r.Kind, m)
			}
		}
	}
	for _, kind := range refs.Kinds() {
		owned, err := c.caches.OwnedConfigs(kind, u.Namespace, u.UID)
		if err != nil {
			utilruntime.HandleError(err)
		}
		for _, m := range owned {
			add(kind, m)
		}
	}
	return keys
}

// resyncHeld queues every held object: the backstop for a deletion a missed event would hold forever.
func (c *Controller) resyncHeld(ctx context.Context) {
	n := 0
	c.eachHeld(func(f caches.ConfigFacts) {
		ns, name := f.NamespaceName()
		c.loop.Queue.Add(configKey(f.Kind, ns, name))
		n++
	})
	if n > 0 {
		logging.FromContext(ctx).Info("re-examining held deletions", "controller", Name, "held", n)
	}
}

func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	k, ns, name, err := reconcile.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, err
	}
	kind := refs.Kind(k)
	inf, ok := c.caches.Configs[kind]
	if !ok {
		return reconcile.Result{}, nil
	}
	m, exists, err := inf.Get(ns, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("object", key))
	switch {
	case !exists:
		return reconcile.Result{}, c.release(ctx, kind, ns, name)
	case m.DeletionTimestamp == nil:
		if api.HasFinalizer(m.Finalizers, api.InUseFinalizer) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, ignoreGone(c.finalizers.Add(ctx, kind, ns, name, m.ResourceVersion))
	case !isHeld(m):
		return reconcile.Result{}, nil // being deleted, and not ours to hold
	}
	return reconcile.Result{}, c.syncDeleting(ctx, kind, m)
}

// syncDeleting lets a deletion complete once nothing live uses the object, or at once in a namespace
// being deleted (everything in it goes; holding would only make the namespace hang).
func (c *Controller) syncDeleting(ctx context.Context, kind refs.Kind, m *metav1.PartialObjectMetadata) error {
	log := logging.FromContext(ctx)
	ref := refs.Ref{Kind: kind, Name: m.Name}
	if terminating, err := c.namespaceTerminating(ctx, m.Namespace); err != nil {
		return err
	} else if terminating {
		log.Info("namespace is being deleted: releasing")
		return ignoreGone(c.finalizers.Remove(ctx, kind, m.Namespace, m.Name, m.ResourceVersion))
	}
	owners := snapshotOwners(m)
	users, err := c.liveCachedUsers(m.Namespace, ref, owners)
	if err != nil {
		return err
	}
	if len(users) == 0 {
		// The cache may not show a user created a moment ago: ask the API server before letting go.
		u, err := c.live.user(ctx, m.Namespace, heldObject{key: configKey(kind, m.Namespace, m.Name), resourceVersion: m.ResourceVersion,
			query: Query{Ref: ref, Owners: owners}})
		if err != nil {
			return err
		}
		if u != nil {
			users = []*caches.User{u}
		}
	}
	obj := involved(kind, m)
	if len(users) > 0 {
		msg := "in use by " + describe(users) + ": deletion waits until nothing uses it"
		log.Info("holding deletion", "users", describe(users))
		c.event(obj, corev1.EventTypeNormal, ReasonHeld, msg)
		return nil
	}
	if err := c.finalizers.Remove(ctx, kind, m.Namespace, m.Name, m.ResourceVersion); err != nil {
		return ignoreGone(err)
	}
	log.Info("nothing uses it any more: deletion released")
	c.event(obj, corev1.EventTypeNormal, ReasonReleased, "nothing uses it any more: deletion completes")
	return nil
}

// release undoes what we wrote on an object that is no longer opted in: our finalizer and the
// ownerReferences we alone wrote. An object that is simply gone needs nothing.
func (c *Controller) release(ctx context.Context, kind refs.Kind, ns, name string) error {
	fresh, err := c.writer.Client.Resource(kind.GVR()).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if api.OptedIn(fresh.Labels) {
		return nil // our cache is behind; its add event is on the way
	}
	return optOut(ctx, c.writer, c.finalizers, kind, fresh)
}

// optOut removes what we wrote on an object that is not opted in (any more).
func optOut(ctx context.Context, w *attach.Writer, f Finalizers, kind refs.Kind, m *metav1.PartialObjectMetadata) error {
	var errs []error
	if api.HasFinalizer(m.Finalizers, api.InUseFinalizer) {
		logging.FromContext(ctx).Info("opted out: removing our finalizer", "object", fmt.Sprintf("%s %s/%s", kind, m.Namespace, m.Name))
		errs = append(errs, ignoreGone(f.Remove(ctx, kind, m.Namespace, m.Name, m.ResourceVersion)))
	}
	if len(attach.Written(&m.ObjectMeta)) > 0 {
		_, err := w.Detach(ctx, kind, m.Namespace, m.Name)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// snapshotOwners are the revisions a pinning snapshot belongs to: each needs it while it exists, with
// pods or not (a rollback recreates its pods from it).
func snapshotOwners(m *metav1.PartialObjectMetadata) []metav1.OwnerReference {
	if m.Labels[api.SnapshotLabel] != api.SnapshotValue {
		return nil
	}
	return m.OwnerReferences
}

// heldIn lists the held objects of namespace as the caches show them: a live look answers them all
// (liveChecks).
func (c *Controller) heldIn(namespace string) []heldObject {
	var out []heldObject
	for kind, inf := range c.caches.Configs {
		objs, err := inf.InNamespace(namespace, isHeld)
		if err != nil {
			utilruntime.HandleError(err)
		}
		for _, m := range objs {
			out = append(out, heldObject{key: configKey(kind, namespace, m.Name), resourceVersion: m.ResourceVersion,
				query: Query{Ref: refs.Ref{Kind: kind, Name: m.Name}, Owners: snapshotOwners(m)}})
		}
	}
	return out
}

func (c *Controller) liveCachedUsers(ns string, r refs.Ref, owners []metav1.OwnerReference) ([]*caches.User, error) {
	all, err := c.caches.UsersOf(ns, r, owners...)
	var live []*caches.User
	for _, u := range all {
		if u.Live() {
			live = append(live, u)
		}
	}
	return live, err
}

// namespaceTerminating reads the namespace; without permission to (a namespaced install), it answers
// no and the objects are released as their users go, which namespace deletion brings about anyway.
func (c *Controller) namespaceTerminating(ctx context.Context, ns string) (bool, error) {
	n, err := c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return false, nil
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return n.DeletionTimestamp != nil || n.Status.Phase == corev1.NamespaceTerminating, nil
}

// needsLook reports whether sync could write anything for a cached object, as pvcprotection decides
// which claims to queue (NeedToAddFinalizer or IsDeletionCandidate):
//
//	being deleted | our finalizer | sync
//	no            | yes           | nothing: not queued
//	no            | no            | adds the finalizer
//	yes           | yes           | holds the deletion or releases it
//	yes           | no            | nothing (not ours to hold): not queued
//
// An object that went (or left the opted-in selection) is always queued: sync undoes what we wrote.
// Not queueing the first case keeps a start from queueing every opted-in object of the cluster (87,000
// at 150,000 Pods, all finalized): the queue's maps keep the room a burst made them grow to.
func needsLook(m *metav1.PartialObjectMetadata) bool {
	return (m.DeletionTimestamp == nil) != api.HasFinalizer(m.Finalizers, api.InUseFinalizer)
}

func always(*metav1.PartialObjectMetadata) bool { return true }

// isHeld: being deleted, and our finalizer holds it.
func isHeld(m *metav1.PartialObjectMetadata) bool { return held(m.DeletionTimestamp, m.Finalizers) }

func held(deleted *metav1.Time, finalizers []string) bool {
	return deleted != nil && api.HasFinalizer(finalizers, api.InUseFinalizer)
}

// eachHeld calls fn for every cached object our finalizer holds (under its store's read lock: fn must
// not call the caches).
func (c *Controller) eachHeld(fn func(caches.ConfigFacts)) {
	c.caches.EachConfig(func(f caches.ConfigFacts) {
		if held(f.Deleted, f.Finalizers) {
			fn(f)
		}
	})
}

// holds counts the cached objects our finalizer holds, and returns the earliest deletionTimestamp
// among them (zero when none).
func (c *Controller) holds() (int, time.Time) {
	n := 0
	var oldest time.Time
	c.eachHeld(func(f caches.ConfigFacts) {
		n++
		if t := f.Deleted.Time; oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	})
	return n, oldest
}

// oldestHoldAge is how long the oldest held deletion has waited; 0 when none does. A deletion held
// for long is either in use for long (a revision kept by revisionHistoryLimit) or missed: the alert
// on it tells an operator to look (configmap-attacher history, the DeletionHeld events).
func (c *Controller) oldestHoldAge() time.Duration {
	_, oldest := c.holds()
	if oldest.IsZero() {
		return 0
	}
	return max(c.now().Sub(oldest), 0)
}

func (c *Controller) event(obj *corev1.ObjectReference, typ, reason, msg string) {
	if c.events != nil {
		c.events.Event(obj, typ, reason, msg)
	}
}

func involved(kind refs.Kind, m *metav1.PartialObjectMetadata) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: string(kind), Namespace: m.Namespace, Name: m.Name, UID: m.UID}
}

// describe names users the way kubectl does ("pod/web-1, replicaset/web-5d8f"), the first few of them.
func describe(users []*caches.User) string {
	names := make([]string, 0, len(users))
	for _, u := range users {
		names = append(names, strings.ToLower(u.TypeMeta.Kind)+"/"+u.Name)
	}
	sort.Strings(names)
	const shown = 5
	if len(names) > shown {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
	}
	return strings.Join(names, ", ")
}

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
