package pinning

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Name names the controller in logs and metrics.
const Name = "pinning"

// Reasons of the Events it records.
const (
	ReasonPinned   = "Pinned"      // on a revision: which snapshot each pinned object gets
	ReasonDrift    = "ConfigDrift" // on a pinned object: changed, but no revision runs the new content
	ReasonUnpinned = "Unpinned"    // on a pod: it reads a pinned object by its own name
	// ReasonPinRemoved, on a revision: it reads an object that lost its pin label (earlier revisions
	// have snapshots of it), so its pods see every change to it.
	ReasonPinRemoved = "PinRemoved"
	// ReasonNotPinnable, on a revision: it reads an object labelled for pinning that is never
	// snapshotted (a service-account-token Secret); its pods read the object itself.
	ReasonNotPinnable = "NotPinnable"
)

// driftDelay leaves a deploy that changes the object and the template together time to create its
// new revision before a change without one is reported.
const driftDelay = 30 * time.Second

// revisionKinds are the revisions pods are pinned to.
func revisionKinds() []caches.Kind {
	return []caches.Kind{caches.ReplicaSet, caches.ControllerRevision}
}

// Controller takes each revision's snapshots when the revision appears, and reports drift and unpinned
// pods. Keys: revision keys (caches.Key), and "drift/Kind/namespace/name" for pinned objects.
type Controller struct {
	caches *caches.Caches
	taker  *Taker
	events record.EventRecorder
	loop   *reconcile.Loop
}

// New wires the controller to the caches (which must include the pinning caches). A nil taker takes
// no snapshot (admission policy mode: the table controller does, internal/pinning/policy).
func New(c *caches.Caches, taker *Taker, events record.EventRecorder, m *metrics.Metrics) (*Controller, error) {
	if c.Pinning == nil {
		return nil, errors.New("pinning caches missing")
	}
	ctl := &Controller{caches: c, taker: taker, events: events}
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: ctl.sync, Metrics: m, Start: ctl.queueUnsynced}
	// None of the handlers looks at the caches' first list: queueUnsynced does, once they hold it all.
	for _, kind := range revisionKinds() {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandlerAfterFirstList(ctl.revisionHandler()); err != nil {
				return nil, err
			}
		}
	}
	for kind, inf := range c.Pinning.Pins {
		if err := inf.AddEventHandlerAfterFirstList(ctl.pinHandler(kind)); err != nil {
			return nil, err
		}
	}
	if err := c.Pinning.Namespaces.AddEventHandlerAfterFirstList(ctl.namespaceHandler()); err != nil {
		return nil, err
	}
	if pods, ok := c.Users[caches.Pod]; ok {
		if err := pods.AddEventHandlerAfterFirstList(cache.ResourceEventHandlerFuncs{AddFunc: ctl.enqueueAudit, UpdateFunc: ctl.enqueueAuditIfReadsMore}); err != nil {
			return nil, err
		}
	}
	if m != nil {
		m.Gauge("configmap_attacher_unpinned_pods", "Pods of pinning namespaces reading a pinned object by its own name.", func() float64 { return float64(len(ctl.unpinnedPods())) })
		m.Gauge("configmap_attacher_pinned_drift", "Pinned objects whose content no revision runs.", func() float64 { return float64(len(ctl.drifted())) })
	}
	return ctl, nil
}

// Loop is the controller's queue and workers.
func (c *Controller) Loop() *reconcile.Loop { return c.loop }

func (c *Controller) revisionHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if u, ok := caches.UserOf(obj); ok {
				c.loop.Queue.Add(u.Key())
			}
		},
		UpdateFunc: func(_, cur any) {
			if u, ok := caches.UserOf(cur); ok {
				c.loop.Queue.Add(u.Key())
			}
		},
	}
}

// pinHandler: an object newly labelled for pinning is snapshotted for the revisions using it; a change
// is checked for drift once a deploy carrying it has had time to create its revision.
func (c *Controller) pinHandler(kind refs.Kind) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m, ok := obj.(metav1.Object); ok {
				c.enqueueUsers(m.GetNamespace(), refs.Ref{Kind: kind, Name: m.GetName()})
			}
		},
		UpdateFunc: func(_, cur any) {
			if m, ok := cur.(metav1.Object); ok {
				c.loop.Queue.AddAfter(driftKey(kind, m.GetNamespace(), m.GetName()), driftDelay)
			}
		},
	}
}

// namespaceHandler pins every revision of a namespace that turns pinning on, or that the cache shows
// labelled for the first time: a revision whose event came before its namespace's was skipped as "not
// enabled", and would otherwise wait for a pod to be pinned, by the webhook, from whatever the object
// holds by then.
func (c *Controller) namespaceHandler() cache.ResourceEventHandler {
	enqueue := func(ns string) {
		for _, kind := range revisionKinds() {
			if inf, ok := c.caches.Users[kind]; ok {
				users, _ := inf.ByIndex(cache.NamespaceIndex, ns)
				for _, u := range users {
					c.loop.Queue.Add(u.Key())
				}
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := caches.MetaOf(obj); ok && n.Labels[api.PinningNamespaceLabel] == api.PinningEnabled {
				enqueue(n.Name)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, okO := caches.MetaOf(old)
			n, okN := caches.MetaOf(cur)
			if okO && okN && o.Labels[api.PinningNamespaceLabel] != n.Labels[api.PinningNamespaceLabel] {
				enqueue(n.Name)
			}
		},
	}
}

func (c *Controller) enqueueUsers(ns string, r refs.Ref) {
	for _, kind := range revisionKinds() {
		if inf, ok := c.caches.Users[kind]; ok {
			users, _ := inf.InNamespace(ns, caches.Using(r))
			for _, u := range users {
				c.loop.Queue.Add(u.Key())
			}
		}
	}
}

func driftKey(kind refs.Kind, ns, name string) string {
	return fmt.Sprintf("drift/%s/%s/%s", kind, ns, name)
}

// enqueueAuditIfReadsMore queues a pod for the audit again when it reads an object it did not: an
// ephemeral container (kubectl debug), added by an update that no admission of pinning sees.
func (c *Controller) enqueueAuditIfReadsMore(old, cur any) {
	o, okO := caches.UserOf(old)
	n, okN := caches.UserOf(cur)
	if okO && okN && slices.ContainsFunc(n.Refs, func(r refs.Ref) bool { return !slices.Contains(o.Refs, r) }) {
		c.enqueueAudit(cur)
	}
}

// enqueueAudit queues a new pod for the audit: through the queue, because its workers start only
// once every cache (namespaces, pins) has synced.
func (c *Controller) enqueueAudit(obj any) {
	if u, ok := caches.UserOf(obj); ok {
		c.loop.Queue.Add("audit/" + u.Namespace + "/" + u.Name)
	}
}

// queueUnsynced queues what the caches' first list brought that a sync would act on: the revisions
// needsSync names and the pods the audit would report. At a start on a cluster of 150,000 Pods this is
// a handful of keys instead of every revision and a key per Pod, whose room the work queue's maps keep
// after they drain.
func (c *Controller) queueUnsynced(ctx context.Context) {
	revisions, pods := 0, 0
	for _, kind := range revisionKinds() {
		c.caches.EachRevision(kind, func(u *caches.User) {
			if c.needsSync(u) {
				c.loop.Queue.Add(u.Key())
				revisions++
			}
		})
	}
	if inf, ok := c.caches.Users[caches.Pod]; ok {
		for _, n := range c.caches.Pinning.Namespaces.List() {
			if !c.caches.Pinning.Enabled(n.Name) {
				continue
			}
			unpinned, _ := inf.InNamespace(n.Name, func(u *caches.User) bool { return len(c.unpinned(u)) > 0 })
			for _, u := range unpinned {
				c.loop.Queue.Add("audit/" + u.Namespace + "/" + u.Name)
				pods++
			}
		}
	}
	logging.FromContext(ctx).Info("queued the revisions to pin and the pods to report", "revisions", revisions, "pods", pods)
}

// needsSync reports whether a sync of the revision would act, as the caches tell:
//
//	a revision of a pinning namespace, not being deleted | an object it reads                                    | needsSync
//	no                                                   | -                                                     | no
//	yes                                                  | pinned, without its snapshot (and snapshots are ours) | yes: take it
//	yes                                                  | not pinned, though earlier revisions have snapshots   | yes: PinRemoved
//	yes                                                  | none of those                                         | no
func (c *Controller) needsSync(u *caches.User) bool {
	if u.DeletionTimestamp != nil || !isRevision(u) || !c.caches.Pinning.Enabled(u.Namespace) {
		return false
	}
	for _, r := range u.Refs {
		if _, pinned := c.caches.Pinning.Pin(u.Namespace, r); !pinned {
			if _, removed := c.pinRemoved(u.Namespace, string(u.UID), r); removed {
				return true
			}
			continue
		}
		if _, taken := c.caches.Pinning.Snapshot(u.Namespace, string(u.UID), r); !taken && c.taker != nil {
			return true
		}
	}
	return false
}

func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	if rest, ok := strings.CutPrefix(key, "drift/"); ok {
		return reconcile.Result{}, c.checkDrift(rest)
	}
	if rest, ok := strings.CutPrefix(key, "audit/"); ok {
		c.auditPod(rest)
		return reconcile.Result{}, nil
	}
	k, ns, name, err := reconcile.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, err
	}
	kind := caches.Kind(k)
	inf, ok := c.caches.Users[kind]
	if !ok {
		return reconcile.Result{}, nil
	}
	u, exists, err := inf.Get(ns, name)
	if err != nil || !exists || u.DeletionTimestamp != nil || !isRevision(u) || !c.caches.Pinning.Enabled(ns) {
		return reconcile.Result{}, err
	}
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("revision", key))
	rev := u.Revision()
	var taken, removed []string
	var errs []error
	for _, r := range u.Refs {
		if _, pinned := c.caches.Pinning.Pin(ns, r); !pinned {
			if d, ok := c.pinRemoved(ns, string(u.UID), r); ok {
				removed = append(removed, d)
			}
			continue
		}
		if _, ok := c.caches.Pinning.Snapshot(ns, string(u.UID), r); ok || c.taker == nil {
			continue // pinned; or admission policy mode, where the table controller takes snapshots
		}
		snap, err := c.taker.Take(ctx, rev, r)
		if errors.Is(err, ErrNotPinned) {
			continue // the label went away meanwhile
		}
		if errors.Is(err, ErrNotPinnable) {
			c.event(&corev1.ObjectReference{APIVersion: u.APIVersion, Kind: u.TypeMeta.Kind, Namespace: ns, Name: name, UID: u.UID},
				corev1.EventTypeWarning, ReasonNotPinnable, err.Error())
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		taken = append(taken, fmt.Sprintf("%s/%s -> %s", strings.ToLower(string(r.Kind)), r.Name, snap))
	}
	if len(taken) > 0 {
		logging.FromContext(ctx).Info("pinned", "snapshots", taken)
		c.event(&corev1.ObjectReference{APIVersion: u.APIVersion, Kind: u.TypeMeta.Kind, Namespace: ns, Name: name, UID: u.UID},
			corev1.EventTypeNormal, ReasonPinned, "pods of this revision read "+strings.Join(taken, ", "))
	}
	if len(removed) > 0 {
		c.event(&corev1.ObjectReference{APIVersion: u.APIVersion, Kind: u.TypeMeta.Kind, Namespace: ns, Name: name, UID: u.UID},
			corev1.EventTypeWarning, ReasonPinRemoved, "pods of this revision read "+strings.Join(removed, ", ")+
				" as they are and see every change: the label "+api.PinLabel+"="+api.PinValue+" was removed (a post-renderer or a patch?); "+
				"put it back to pin the next revision")
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// pinRemoved describes an object r the revision reads unpinned although other revisions have
// snapshots of it: its pin label went away after they were taken. A revision that owns a snapshot
// keeps reading it (the webhook), so only revisions without one are reported.
func (c *Controller) pinRemoved(ns, revision string, r refs.Ref) (string, bool) {
	snaps := c.caches.Pinning.SnapshotsOf(ns, r)
	if len(snaps) == 0 {
		return "", false
	}
	if _, own := c.caches.Pinning.Snapshot(ns, revision, r); own {
		return "", false
	}
	return fmt.Sprintf("%s/%s (earlier revisions read its snapshots %s)", strings.ToLower(string(r.Kind)), r.Name, strings.Join(snaps, ", ")), true
}

// isRevision: a ReplicaSet, or a ControllerRevision of a StatefulSet or DaemonSet.
func isRevision(u *caches.User) bool {
	if u.Kind() == caches.ReplicaSet {
		return true
	}
	owner := u.Owner
	if owner == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	return err == nil && gv.Group == "apps" && (owner.Kind == "StatefulSet" || owner.Kind == "DaemonSet")
}

// checkDrift reports a pinned object whose current content no revision using it runs: it changed in
// place and no new revision came (the template did not change: no checksum annotation).
func (c *Controller) checkDrift(key string) error {
	kind, ns, name, err := reconcile.SplitKey(key)
	if err != nil {
		return err
	}
	r := refs.Ref{Kind: refs.Kind(kind), Name: name}
	if d, ok := c.driftOf(ns, r); ok {
		c.event(&corev1.ObjectReference{APIVersion: "v1", Kind: string(r.Kind), Namespace: ns, Name: r.Name}, corev1.EventTypeWarning, ReasonDrift, d)
	}
	return nil
}

// driftOf describes the drift of one pinned object, if its revisions all run other content.
func (c *Controller) driftOf(ns string, r refs.Ref) (string, bool) {
	if !c.caches.Pinning.Enabled(ns) {
		return "", false
	}
	obj, ok := c.caches.Pinning.Pin(ns, r)
	if !ok {
		return "", false
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return "", false
	}
	current, err := SnapshotName(m)
	if err != nil {
		return "", false
	}
	var snapshots []string
	for _, kind := range revisionKinds() {
		inf, ok := c.caches.Users[kind]
		if !ok {
			continue
		}
		users, _ := inf.InNamespace(ns, caches.Using(r))
		for _, u := range users {
			snap, ok := c.caches.Pinning.Snapshot(ns, string(u.UID), r)
			if !ok || u.DeletionTimestamp != nil {
				continue
			}
			if snap == current {
				return "", false
			}
			snapshots = append(snapshots, snap)
		}
	}
	if len(snapshots) == 0 {
		return "", false
	}
	return fmt.Sprintf("changed, but no revision runs its content (%s): pods keep their revision's snapshot (%s) until the pod "+
		"template changes, e.g. its checksum annotation", current, strings.Join(snapshots, ", ")), true
}

func (c *Controller) drifted() []string {
	var out []string
	for kind, inf := range c.caches.Pinning.Pins {
		for _, obj := range inf.List() {
			if m, ok := obj.(metav1.Object); ok {
				if _, d := c.driftOf(m.GetNamespace(), refs.Ref{Kind: kind, Name: m.GetName()}); d {
					out = append(out, m.GetNamespace()+"/"+m.GetName())
				}
			}
		}
	}
	return out
}

// auditPod records an Event on a pod ("namespace/name") of a pinning namespace that a revision
// controls but that reads a pinned object by its own name: created before pinning, or while the
// webhook was down with failurePolicy Ignore. It sees changes to that object, the very thing pinning
// prevents.
func (c *Controller) auditPod(key string) {
	ns, name, _ := strings.Cut(key, "/")
	pods, ok := c.caches.Users[caches.Pod]
	if !ok {
		return
	}
	u, exists, err := pods.Get(ns, name)
	if err != nil || !exists {
		return
	}
	if reads := c.unpinned(u); len(reads) > 0 {
		c.event(&corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: u.Namespace, Name: u.Name, UID: u.UID}, corev1.EventTypeWarning, ReasonUnpinned,
			"reads "+strings.Join(reads, ", ")+" directly, not its revision's snapshot: it sees every change to it (created before pinning, or while the webhook was unreachable; or an ephemeral container reads it)")
	}
}

func (c *Controller) unpinned(u *caches.User) []string {
	if !u.Live() || !c.caches.Pinning.Enabled(u.Namespace) {
		return nil
	}
	owner := u.Owner
	if owner == nil || (owner.Kind != "ReplicaSet" && owner.Kind != "StatefulSet" && owner.Kind != "DaemonSet") {
		return nil
	}
	var reads []string
	for _, r := range u.Refs {
		if _, pinned := c.caches.Pinning.Pin(u.Namespace, r); pinned {
			reads = append(reads, strings.ToLower(string(r.Kind))+"/"+r.Name)
		}
	}
	return reads
}

// unpinnedPods lists the pods that read a pinned object by its own name. Only pinning namespaces'
// pods are looked at: a view made of each of a cluster's pods at every scrape (150,000 in the scale
// bench) would cost the metrics more than the pods it counts.
func (c *Controller) unpinnedPods() []string {
	pods, ok := c.caches.Users[caches.Pod]
	if !ok {
		return nil
	}
	var out []string
	for _, ns := range c.caches.Pinning.Namespaces.List() {
		if !c.caches.Pinning.Enabled(ns.Name) {
			continue
		}
		found, err := pods.InNamespace(ns.Name, func(u *caches.User) bool { return len(c.unpinned(u)) > 0 })
		if err != nil {
			utilruntime.HandleError(err)
		}
		for _, u := range found {
			out = append(out, u.Namespace+"/"+u.Name)
		}
	}
	return out
}

func (c *Controller) event(ref *corev1.ObjectReference, typ, reason, msg string) {
	if c.events != nil {
		c.events.Event(ref, typ, reason, msg)
	}
}
