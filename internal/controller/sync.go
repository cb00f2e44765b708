package controller

import (
	"context"
	"errors"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// sync makes every opted-in config object used by one revision carry an ownerReference to it, and
// takes back the references it wrote to objects the revision no longer uses. It reads only caches
// (and, for attach-all workloads, the few objects not in them) and writes only what is missing.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	k, namespace, name, err := reconcile.SplitKey(key)
	kind := caches.Kind(k)
	if err != nil {
		return reconcile.Result{}, err
	}
	inf, ok := c.caches.Users[kind]
	if !ok {
		return reconcile.Result{}, nil
	}
	u, exists, err := inf.Get(namespace, name)
	if err != nil || !exists {
		return reconcile.Result{}, err // gone: the garbage collector takes it from here
	}
	if !c.follows(u) || u.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("revision", key))
	all := c.attachAll(u)
	if err := c.detachUnused(ctx, u); err != nil {
		return reconcile.Result{}, err
	}
	objects, err := c.usedObjects(ctx, u, all)
	if err != nil || len(objects) == 0 {
		return reconcile.Result{}, err
	}
	res, err := c.writer.Attach(ctx, u.Revision(), objects, attach.Options{
		// Our own recent writes may not have reached the cache yet; writing again would cost a conflict.
		InFlight: func(ch attach.Change) bool { return c.pending.has(ch.Object.Meta.UID, u.UID) },
		// A conflict means the object changed since the cache showed it: still opted in?
		Wanted: func(m *metav1.PartialObjectMetadata) bool {
			return m.DeletionTimestamp == nil && (all || api.OptedIn(m.Labels))
		},
	})
	if res == nil {
		return reconcile.Result{}, err
	}
	for _, ch := range res.Written {
		c.pending.expect(ch.Object.Meta.UID, u.UID, func() bool { return c.cachedOwnedBy(ch.Object, u.UID) })
		if c.metrics != nil {
			c.metrics.Attached(ch.Object.Kind, time.Since(u.CreationTimestamp.Time))
		}
	}
	var result reconcile.Result
	if len(res.Skipped) > 0 {
		// If the watch event showing our write never comes, nothing else would bring this key back
		// (there is no resync): look again once the expectation has expired.
		result.RequeueAfter = c.pending.ttl
	}
	return result, err
}

// detachUnused takes back the ownerReferences we wrote from the revision to opted-in objects its pod
// template no longer references. Only a CronJob's (or a bare ReplicaSet's) template changes in place;
// the objects its earlier Jobs or pods still use stay theirs, and in-use protection holds them. The
// reference stays when it is the object's last: without owners the garbage collector would never
// delete it, and we do not delete config ourselves (a user who may only edit a CronJob must not get a
// ConfigMap deleted through us). Such an object goes with the revision instead, e.g. a CronJob that
// changed its config before any Job ran keeps the earlier config until it is deleted.
func (c *Controller) detachUnused(ctx context.Context, u *caches.User) error {
	unused, err := c.unusedOwned(u)
	errs := []error{err}
	for _, o := range unused {
		if _, err := c.writer.DetachUnlessLast(ctx, o.Kind, o.Meta.Namespace, o.Meta.Name, u.UID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unusedOwned returns the cached opted-in objects the revision owns but its pod template no longer
// references.
func (c *Controller) unusedOwned(u *caches.User) ([]attach.Object, error) {
	var out []attach.Object
	var errs []error
	for kind := range c.caches.Configs {
		owned, err := c.caches.OwnedConfigs(kind, u.Namespace, u.UID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range owned {
			// A pinning snapshot is owned by the revisions pinned to it, whose templates name the
			// original object: that ownership is the pin (internal/pinning), not a use to take back.
			// Detaching it (a revision sharing its snapshot with the one before, an image-only deploy)
			// unpinned the revision, and the pinning controller pinned it again, without end.
			if !u.Uses(refs.Ref{Kind: kind, Name: m.Name}) && m.Labels[api.SnapshotLabel] != api.SnapshotValue {
				out = append(out, attach.Object{Kind: kind, Meta: m})
			}
		}
	}
	return out, errors.Join(errs...)
}

// unsynced reports whether a sync of the revision would write, as far as the caches tell:
//
//	followed and not being deleted | its workload attaches all | a used opted-in object it does not own | an owned object it no longer uses | unsynced
//	no                             | -                         | -                                      | -                                 | no
//	yes                            | yes                       | -                                      | -                                 | yes: it uses objects the caches do not hold
//	yes                            | no                        | yes                                    | -                                 | yes
//	yes                            | no                        | no                                     | yes                               | yes
//	yes                            | no                        | no                                     | no                                | no
//
// A cache that cannot answer counts as yes: the sync reports why. An owned object it no longer uses is
// queued even when it is the object's last reference, which the sync keeps (rare: a CronJob's template
// changed in place).
func (c *Controller) unsynced(ctx context.Context, u *caches.User) bool {
	if !c.follows(u) || u.DeletionTimestamp != nil {
		return false
	}
	if c.attachAll(u) {
		return true
	}
	used, err := c.usedObjects(ctx, u, false) // without attach-all: the caches only
	if err != nil || slices.ContainsFunc(used, func(o attach.Object) bool { return !revision.OwnedBy(&o.Meta.ObjectMeta, u.UID) }) {
		return true
	}
	unused, err := c.unusedOwned(u)
	return err != nil || len(unused) > 0
}

// cachedOwnedBy reports whether the config cache already shows o owned by uid.
func (c *Controller) cachedOwnedBy(o attach.Object, uid types.UID) bool {
	inf, ok := c.caches.Configs[o.Kind]
	if !ok {
		return false
	}
	m, exists, err := inf.Get(o.Meta.Namespace, o.Meta.Name)
	return err == nil && exists && m.UID == o.Meta.UID && revision.OwnedBy(&m.ObjectMeta, uid)
}

// follows reports whether the object is a revision we attach to: any ReplicaSet matching
// -replicaset-selector, a ControllerRevision of a StatefulSet or DaemonSet, any Job or CronJob, and a
// Pod no controller manages (a controller's pods read config through its revision).
func (c *Controller) follows(u *caches.User) bool {
	owner := u.Owner
	switch u.Kind() {
	case caches.ReplicaSet:
		return c.opts.ReplicaSetSelector.Matches(labels.Set(u.Labels))
	case caches.ControllerRevision:
		return owner != nil && isApps(owner) && (owner.Kind == "StatefulSet" || owner.Kind == "DaemonSet")
	case caches.Job, caches.CronJob:
		return true
	case caches.Pod:
		return owner == nil
	}
	return false
}

func isApps(ref *metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == "apps"
}

// attachAll reports whether the revision's workload (its controller, or itself when it has none)
// opts in everything it references, in a namespace where an administrator allowed that.
func (c *Controller) attachAll(u *caches.User) bool {
	if !slices.Contains(c.opts.AttachAllNamespaces, u.Namespace) && !slices.Contains(c.opts.AttachAllNamespaces, "*") {
		return false
	}
	w := u
	if owner := u.Owner; owner != nil {
		inf, ok := c.caches.Users[caches.Kind(owner.Kind)]
		if !ok {
			return false
		}
		var exists bool
		var err error
		w, exists, err = inf.Get(u.Namespace, owner.Name)
		if err != nil || !exists || w.UID != owner.UID {
			return false
		}
	}
	return w.Annotations[api.AttachAllAnnotation] == "true"
}

// usedObjects returns the opted-in config objects the revision's pod template references. Objects
// that do not exist (yet) are skipped: their creation event requeues this revision.
func (c *Controller) usedObjects(ctx context.Context, u *caches.User, all bool) ([]attach.Object, error) {
	var out []attach.Object
	for _, r := range u.Refs {
		inf, followed := c.caches.Configs[r.Kind]
		if !followed {
			continue
		}
		m, exists, err := inf.Get(u.Namespace, r.Name)
		if err != nil {
			return nil, err
		}
		if exists && m.DeletionTimestamp != nil {
			continue // being deleted: in-use protection holds it while this revision uses it
		}
		if exists {
			out = append(out, attach.Object{Kind: r.Kind, Meta: m})
			continue
		}
		if !all {
			continue
		}
		// Not labelled, but the workload opts in everything: read it directly. Rare, so not cached.
		m, err = c.writer.Client.Resource(r.Kind.GVR()).Namespace(u.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m.DeletionTimestamp == nil {
			out = append(out, attach.Object{Kind: r.Kind, Meta: m})
		}
	}
	return out, nil
}
