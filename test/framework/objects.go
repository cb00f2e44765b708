package framework

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
)

// applySpec creates obj, or replaces the spec of the live object of that name (a deploy tool's
// custom resource: an Application, a HelmRelease, a HelmRepository).
func (c *Cluster) applySpec(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	_, err := c.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return c.updateObject(ctx, gvr, obj.GetNamespace(), obj.GetName(), func(live *unstructured.Unstructured) error {
		live.Object["spec"] = obj.Object["spec"]
		return nil
	})
}

// updateObject reads, changes and writes an object, again on a conflict: the deploy tools write their
// objects' status all the time.
func (c *Cluster) updateObject(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, change func(*unstructured.Unstructured) error) error {
	res := c.Dynamic.Resource(gvr).Namespace(ns)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := change(live); err != nil {
			return err
		}
		_, err = res.Update(ctx, live, metav1.UpdateOptions{})
		return err
	})
}
