package protection

import (
	"context"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/parallel"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// UserLister finds the live users of a config object: what references it, and the given owners (a
// pinning snapshot's revisions).
type UserLister interface {
	Users(ctx context.Context, namespace string, r refs.Ref, owners ...metav1.OwnerReference) ([]*caches.User, error)
}

// APIUsers lists users straight from the API server: the check pvcprotection makes before it lets a
// claim go, because a cache may not show yet what was created a moment ago (a pod created just before
// the object's deletion). Every kind is listed at once, each with one LIST of the namespace without a
// resourceVersion: a consistent read, which kube-apiserver serves from its watch cache since 1.34
// (consistent reads from cache, KEP-2340), not from etcd. Objects are reduced the way the caches
// reduce them, so both are judged alike.
type APIUsers struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Rollouts is set when the Argo Rollouts CRD is installed.
	Rollouts bool
}

// Users lists every live object in namespace whose pods or pod template reference r, or whose uid is
// one of owners.
func (a APIUsers) Users(ctx context.Context, ns string, r refs.Ref, owners ...metav1.OwnerReference) ([]*caches.User, error) {
	lo := metav1.ListOptions{}
	apps, batch, core := a.Kube.AppsV1(), a.Kube.BatchV1(), a.Kube.CoreV1()
	lists := []func() (runtime.Object, error){
		func() (runtime.Object, error) { return core.Pods(ns).List(ctx, lo) },
		func() (runtime.Object, error) { return apps.ReplicaSets(ns).List(ctx, lo) },
		func() (runtime.Object, error) { return apps.ControllerRevisions(ns).List(ctx, lo) },
		func() (runtime.Object, error) { return batch.Jobs(ns).List(ctx, lo) },
		func() (runtime.Object, error) { return batch.CronJobs(ns).List(ctx, lo) },
		func() (runtime.Object, error) { return apps.Deployments(ns).List(ctx, lo) },
		func() (runtime.Object, error) { return apps.StatefulSets(ns).List(ctx, lo) },
		func() (runtime.Object, error) { return apps.DaemonSets(ns).List(ctx, lo) },
	}
	if a.Rollouts {
		lists = append(lists, func() (runtime.Object, error) {
			list, err := a.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).List(ctx, lo)
			if apierrors.IsNotFound(err) {
				return &unstructured.UnstructuredList{}, nil
			}
			return list, err
		})
	}
	var mu sync.Mutex
	var users []*caches.User
	g := parallel.New(len(lists))
	for _, list := range lists {
		g.Go(func() error {
			l, err := list()
			if err != nil {
				return err
			}
			items, err := meta.ExtractList(l) // pointers into the list
			if err != nil {
				return err
			}
			for _, o := range items {
				u, err := caches.Reduce(o)
				if err != nil {
					return err
				}
				if u.Live() && (u.Uses(r) || slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return o.UID == u.UID })) {
					mu.Lock()
					users = append(users, u)
					mu.Unlock()
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("listing what uses %s %s/%s: %w", r.Kind, ns, r.Name, err)
	}
	return users, nil
}
