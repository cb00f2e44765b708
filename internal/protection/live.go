package protection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/parallel"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Query asks whether a config object is in use: by a live object referencing Ref, or by one of Owners
// (a pinning snapshot's revisions, which need it while they exist).
type Query struct {
	Ref    refs.Ref
	Owners []metav1.OwnerReference
}

// usedBy reports whether the live object u answers the query.
func (q Query) usedBy(u *caches.User) bool {
	return u.Uses(q.Ref) || slices.ContainsFunc(q.Owners, func(o metav1.OwnerReference) bool { return o.UID == u.UID })
}

// Answer is what one look through a namespace found.
type Answer struct {
	// Users holds, for each query, the first live user found; nil when none.
	Users []*caches.User
	// Unreadable counts, by kind, the objects skipped because they cannot be read as a pod template
	// (caches.ErrUnreadable): they make no pods.
	Unreadable map[caches.Kind]int
}

// UserLister finds the live users of a config object: what references it, and the given owners (a
// pinning snapshot's revisions).
type UserLister interface {
	Users(ctx context.Context, namespace string, r refs.Ref, owners ...metav1.OwnerReference) ([]*caches.User, error)
}

// Looker is a UserLister that answers several objects of a namespace with one look through it
// (APIUsers): the controller then shares a look between the deletions of a namespace waiting at once
// (liveChecks).
type Looker interface {
	Look(ctx context.Context, namespace string, queries []Query) (Answer, error)
}

// lookerOf is live's Looker, or one asking live about each object in turn.
func lookerOf(live UserLister) Looker {
	if l, ok := live.(Looker); ok {
		return l
	}
	return oneByOne{live}
}

type oneByOne struct{ live UserLister }

func (o oneByOne) Look(ctx context.Context, ns string, queries []Query) (Answer, error) {
	ans := Answer{Users: make([]*caches.User, len(queries))}
	for i, q := range queries {
		users, err := o.live.Users(ctx, ns, q.Ref, q.Owners...)
		if err != nil {
			return Answer{}, err
		}
		for _, u := range users {
			if u.Live() && q.usedBy(u) {
				ans.Users[i] = u
				break
			}
		}
	}
	return ans, nil
}

// APIUsers lists users straight from the API server: the check pvcprotection makes before it lets a
// claim go, because a cache may not show yet what was created a moment ago (a pod created just before
// the object's deletion). Every kind is read at once, each by a LIST of the namespace without a
// resourceVersion (a consistent read, which kube-apiserver serves from its watch cache since 1.34,
// consistent reads from cache, KEP-2340), in pages of PageSize objects whose continue tokens keep the
// first page's snapshot: a namespace of thousands of Pods is never in memory at once, which, up to one
// look per protection worker, went beyond the controller's memory by itself. The look stops once
// every query has a user. Objects are reduced the way the caches reduce them, so both are judged
// alike, and one the caches skip (caches.ErrUnreadable) is skipped here too: it would otherwise fail
// every look through its namespace, and hold every deletion there for good.
type APIUsers struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Rollouts is set when the Argo Rollouts CRD is installed.
	Rollouts bool
	// PageSize is the number of objects a page holds; 0 is DefaultPageSize.
	PageSize int64
}

// DefaultPageSize is kubectl's page: ~2 MiB of Pods at a time.
const DefaultPageSize = 500

// errAnswered stops a look once every query has a user.
var errAnswered = errors.New("every query answered")

// lister lists one kind of a namespace, a page at a time.
type lister struct {
	kind caches.Kind
	list pager.ListPageFunc
}

// pageOf makes a typed client's List a pager's page.
func pageOf[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error)) pager.ListPageFunc {
	return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return list(ctx, o) }
}

func (a APIUsers) listers(ns string) []lister {
	apps, batch, core := a.Kube.AppsV1(), a.Kube.BatchV1(), a.Kube.CoreV1()
	out := []lister{
		{caches.Pod, pageOf(core.Pods(ns).List)},
		{caches.ReplicaSet, pageOf(apps.ReplicaSets(ns).List)},
		{caches.ControllerRevision, pageOf(apps.ControllerRevisions(ns).List)},
		{caches.Job, pageOf(batch.Jobs(ns).List)},
		{caches.CronJob, pageOf(batch.CronJobs(ns).List)},
		{caches.Deployment, pageOf(apps.Deployments(ns).List)},
		{caches.StatefulSet, pageOf(apps.StatefulSets(ns).List)},
		{caches.DaemonSet, pageOf(apps.DaemonSets(ns).List)},
	}
	if a.Rollouts {
		out = append(out, lister{caches.Rollout, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := a.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).List(ctx, o)
			if apierrors.IsNotFound(err) {
				return &unstructured.UnstructuredList{}, nil
			}
			return list, err
		}})
	}
	return out
}

// Users returns a live user of r or of one of owners in namespace ns, if any: the first found.
func (a APIUsers) Users(ctx context.Context, ns string, r refs.Ref, owners ...metav1.OwnerReference) ([]*caches.User, error) {
	ans, err := a.Look(ctx, ns, []Query{{Ref: r, Owners: owners}})
	if err != nil || ans.Users[0] == nil {
		return nil, err
	}
	return ans.Users, nil
}

// Look looks through every kind of namespace for a live user of each query.
func (a APIUsers) Look(ctx context.Context, ns string, queries []Query) (Answer, error) {
	log := logging.FromContext(ctx)
	ans := Answer{Users: make([]*caches.User, len(queries)), Unreadable: map[caches.Kind]int{}}
	// The queries by what answers them: a look may ask about thousands of objects at once.
	byRef, byOwner := map[refs.Ref][]int{}, map[types.UID][]int{}
	for i, q := range queries {
		byRef[q.Ref] = append(byRef[q.Ref], i)
		for _, o := range q.Owners {
			byOwner[o.UID] = append(byOwner[o.UID], i)
		}
	}
	open := len(queries)
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var mu sync.Mutex // ans, open
	answer := func(u *caches.User, is []int) {
		for _, i := range is {
			if ans.Users[i] == nil {
				ans.Users[i] = u
				open--
			}
		}
	}
	listers := a.listers(ns)
	g := parallel.New(len(listers))
	for _, l := range listers {
		g.Go(func() error {
			p := pager.New(l.list)
			p.PageSize = a.PageSize
			if p.PageSize == 0 {
				p.PageSize = DefaultPageSize
			}
			// One page read ahead, not ten; an expired continue token fails the look (retried) rather
			// than reading the whole kind in one response.
			p.PageBufferSize, p.FullListIfExpired = 0, false
			err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
				u, err := caches.Reduce(obj)
				if errors.Is(err, caches.ErrUnreadable) {
					log.Warn("skipping an object the live check cannot read: it makes no pods", "err", err)
					mu.Lock()
					ans.Unreadable[l.kind]++
					mu.Unlock()
					return nil
				}
				if err != nil {
					return err
				}
				if !u.Live() {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				for _, r := range u.Refs {
					answer(u, byRef[r])
				}
				answer(u, byOwner[u.UID])
				if open == 0 {
					return errAnswered
				}
				return nil
			})
			if errors.Is(err, errAnswered) {
				stop(errAnswered)
				return nil
			}
			if err != nil && errors.Is(context.Cause(ctx), errAnswered) {
				return nil // another kind answered the last query
			}
			if err != nil {
				return fmt.Errorf("listing %ss: %w", l.kind, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Answer{}, fmt.Errorf("listing what uses config in namespace %s: %w", ns, err)
	}
	return ans, nil
}
