package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// sync makes every opted-in config object used by one ReplicaSet carry an ownerReference to it. It
// reads only caches (and, for attach-all workloads, the few objects not in them) and writes only what
// is missing.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("bad key %q: %w", key, attach.ErrInvalid)
	}
	s, err := c.scopeFor(namespace)
	if err != nil {
		return nil
	}
	rs, err := s.rsLister.ReplicaSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // gone: the garbage collector takes it from here
	}
	if err != nil {
		return err
	}
	ownerKind, ok := workloadKind(rs)
	if !ok || rs.DeletionTimestamp != nil {
		return nil
	}
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("replicaSet", key))

	objects, err := c.usedObjects(ctx, s, rs, c.attachAll(s, rs, ownerKind))
	if err != nil || len(objects) == 0 {
		return err
	}
	changes, err := attach.Plan(rs, objects)
	if err != nil {
		return err
	}
	// Our own recent writes may not have reached the cache yet; writing again would cost a conflict.
	todo := changes[:0:0]
	for _, ch := range changes {
		if !c.pending.has(ch.Object.Meta.UID, rs.UID) {
			todo = append(todo, ch)
		}
	}
	written, err := c.writer.Apply(ctx, todo)
	for _, ch := range written {
		c.pending.expect(ch.Object.Meta.UID, rs.UID)
		c.metrics.attached(ch.Object.Kind, time.Since(rs.CreationTimestamp.Time))
	}
	if apierrors.IsNotFound(err) {
		return nil // the object was deleted meanwhile: nothing left to attach
	}
	return err
}

// workloadKind returns the kind of the ReplicaSet's controller, if it is one we follow.
func workloadKind(rs *appsv1.ReplicaSet) (workload.Kind, bool) {
	owner := metav1.GetControllerOf(rs)
	if owner == nil {
		return "", false
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil {
		return "", false
	}
	switch {
	case gv.Group == workload.RolloutGVR.Group && owner.Kind == string(workload.Rollout):
		return workload.Rollout, true
	case gv.Group == appsv1.GroupName && owner.Kind == string(workload.Deployment):
		return workload.Deployment, true
	}
	return "", false
}

// attachAll reports whether the ReplicaSet's workload opts in everything it references.
func (c *Controller) attachAll(s *scope, rs *appsv1.ReplicaSet, kind workload.Kind) bool {
	lister, ok := s.workloadByKind[kind]
	owner := metav1.GetControllerOf(rs)
	if !ok || owner == nil {
		return false
	}
	obj, err := lister.ByNamespace(rs.Namespace).Get(owner.Name)
	if err != nil {
		return false
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	return ok && m.UID == owner.UID && m.Annotations[refs.AttachAllAnnotation] == "true"
}

// usedObjects returns the opted-in config objects the ReplicaSet's pod template references. Objects
// that do not exist (yet) are skipped: their creation event requeues this ReplicaSet.
func (c *Controller) usedObjects(ctx context.Context, s *scope, rs *appsv1.ReplicaSet, all bool) ([]attach.Object, error) {
	var out []attach.Object
	for _, r := range refs.FromPodSpec(&rs.Spec.Template.Spec).Sorted() {
		inf, followed := s.configs[r.Kind]
		if !followed {
			continue
		}
		obj, exists, err := inf.GetIndexer().GetByKey(rs.Namespace + "/" + r.Name)
		if err != nil {
			return nil, err
		}
		if exists {
			out = append(out, attach.Object{Kind: r.Kind, Meta: obj.(*metav1.PartialObjectMetadata)})
			continue
		}
		if !all {
			continue
		}
		// Not labelled, but the workload opts in everything: read it directly. Rare, so not cached.
		m, err := c.clients.Metadata.Resource(attach.GVR(r.Kind)).Namespace(rs.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
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
