package protection

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// UserLister finds the live users of a config object: what references it, and the given owners (a
// pinning snapshot's revisions).
type UserLister interface {
	Users(ctx context.Context, namespace string, r refs.Ref, owners ...metav1.OwnerReference) ([]*caches.User, error)
}

// APIUsers lists users straight from the API server: the check pvcprotection makes before it lets a
// claim go, because a cache may not show yet what was created a moment ago. Objects are reduced the
// way the caches reduce them, so both are judged alike.
type APIUsers struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Rollouts is set when the Argo Rollouts CRD is installed.
	Rollouts bool
}

// Users lists every live object in namespace whose pods or pod template reference r, or whose uid is
// one of owners.
func (a APIUsers) Users(ctx context.Context, ns string, r refs.Ref, owners ...metav1.OwnerReference) ([]*caches.User, error) {
	var objs []runtime.Object
	add := func(list runtime.Object, err error) error {
		if err != nil {
			return err
		}
		items, err := meta.ExtractList(list) // pointers into the list
		objs = append(objs, items...)
		return err
	}
	lo := metav1.ListOptions{}
	apps, batch, core := a.Kube.AppsV1(), a.Kube.BatchV1(), a.Kube.CoreV1()
	errs := []error{
		add(core.Pods(ns).List(ctx, lo)),
		add(apps.ReplicaSets(ns).List(ctx, lo)),
		add(apps.ControllerRevisions(ns).List(ctx, lo)),
		add(batch.Jobs(ns).List(ctx, lo)),
		add(batch.CronJobs(ns).List(ctx, lo)),
		add(apps.Deployments(ns).List(ctx, lo)),
		add(apps.StatefulSets(ns).List(ctx, lo)),
		add(apps.DaemonSets(ns).List(ctx, lo)),
	}
	if a.Rollouts {
		list, err := a.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).List(ctx, lo)
		if err == nil {
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
		} else if !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("listing what uses %s %s/%s: %w", r.Kind, ns, r.Name, err)
	}
	var out []*caches.User
	for _, o := range objs {
		u, err := caches.Reduce(o)
		if err != nil {
			return nil, err
		}
		if u.Live() && (u.Uses(r) || slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return o.UID == u.UID })) {
			out = append(out, u)
		}
	}
	return out, nil
}
