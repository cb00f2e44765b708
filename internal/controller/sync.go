package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// sync makes every opted-in config object used by one revision carry an ownerReference to it. It
// reads only caches (and, for attach-all workloads, the few objects not in them) and writes only what
// is missing.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	kind, namespace, name, err := splitKey(key)
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
	owner, follows := c.follows(u)
	if !follows || u.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("revision", key))
	objects, err := c.usedObjects(ctx, u, c.attachAll(u, owner))
	if err != nil || len(objects) == 0 {
		return reconcile.Result{}, err
	}
	res, err := c.writer.Attach(ctx, u.Revision(), objects, attach.Options{
		// Our own recent writes may not have reached the cache yet; writing again would cost a conflict.
		InFlight: func(ch attach.Change) bool { return c.pending.has(ch.Object.Meta.UID, u.UID) },
	})
	if res == nil {
		return reconcile.Result{}, err
	}
	for _, ch := range res.Written {
		c.pending.expect(ch.Object.Meta.UID, u.UID)
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

func splitKey(key string) (caches.Kind, string, string, error) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("bad key %q: %w", key, reconcile.ErrPermanent)
	}
	return caches.Kind(parts[0]), parts[1], parts[2], nil
}

// follows reports whether the revision is one we attach to, and returns its workload's controller
// reference: a ReplicaSet controlled by a Deployment or a Rollout, matching -replicaset-selector.
func (c *Controller) follows(u *caches.User) (*metav1.OwnerReference, bool) {
	if u.Kind() != caches.ReplicaSet || !c.selector.Matches(labels.Set(u.Labels)) {
		return nil, false
	}
	owner := metav1.GetControllerOfNoCopy(u)
	if owner == nil {
		return nil, false
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil {
		return nil, false
	}
	switch {
	case gv.Group == workload.RolloutGVR.Group && owner.Kind == string(workload.Rollout),
		gv.Group == "apps" && owner.Kind == string(workload.Deployment):
		return owner, true
	}
	return nil, false
}

// attachAll reports whether the revision's workload opts in everything it references.
func (c *Controller) attachAll(u *caches.User, owner *metav1.OwnerReference) bool {
	inf, ok := c.caches.Users[caches.Kind(owner.Kind)]
	if !ok {
		return false
	}
	w, exists, err := inf.Get(u.Namespace, owner.Name)
	return err == nil && exists && w.UID == owner.UID && w.Annotations[api.AttachAllAnnotation] == "true"
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
		out = append(out, attach.Object{Kind: r.Kind, Meta: m})
	}
	return out, nil
}
