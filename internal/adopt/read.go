// Package adopt prepares a workload deployed without `render` for its first upgrade with it.
//
// That upgrade renames the workload's config objects (app-config becomes app-config-<hash>), so Helm
// deletes the unhashed ones while the running ReplicaSet's pods still mount them: the outage this
// project exists to prevent, caused by moving to it. Adopting first gives every config object the
// workload's revisions use what `render` would have given it — the opt-in label and
// helm.sh/resource-policy: keep — and ties it to those revisions through the one attach step, so the
// upgrade leaves it to the old pods and the garbage collector deletes it with its last revision.
package adopt

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Helm's keep policy: `helm upgrade` reads the live object and leaves it alone when it carries this.
const (
	ResourcePolicyAnnotation = "helm.sh/resource-policy"
	KeepPolicy               = "keep"
)

// ErrInvalid marks input adopt refuses before writing anything.
var ErrInvalid = errors.New("cannot adopt")

// Workload names the workload to adopt.
type Workload struct {
	Kind      caches.Kind
	Namespace string
	Name      string
}

func (w Workload) String() string { return fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name) }

// ParseKind accepts the spellings kubectl users type for the kinds adopt follows.
func ParseKind(s string) (caches.Kind, error) {
	switch strings.ToLower(s) {
	case "deployment", "deployments", "deploy", "deployments.apps":
		return caches.Deployment, nil
	case "rollout", "rollouts", "ro", "rollouts.argoproj.io":
		return caches.Rollout, nil
	case "statefulset", "statefulsets", "sts", "statefulsets.apps":
		return caches.StatefulSet, nil
	case "daemonset", "daemonsets", "ds", "daemonsets.apps":
		return caches.DaemonSet, nil
	}
	return "", fmt.Errorf("%w: kind %q: adopt takes deployment, rollout, statefulset or daemonset", ErrInvalid, s)
}

// Plan is everything adopting a workload takes, read before anything is written.
type Plan struct {
	Workload Workload
	// Owner says what deploys the workload (a Helm release, an Argo CD application), "" when its
	// metadata does not say.
	Owner string
	// Revisions are the workload's revision objects (ReplicaSets or ControllerRevisions), oldest first.
	Revisions []*revision.Revision
	// Objects are the config objects to adopt, with what each lacks.
	Objects []*Object
	// Skipped are the referenced objects left alone, with why.
	Skipped []Skipped
}

// Object is one config object to adopt.
type Object struct {
	attach.Object
	// AddLabel and AddKeep say which of the opt-in label and the keep annotation it lacks.
	AddLabel, AddKeep bool
	// UsedBy are the revisions whose pod template references it.
	UsedBy []*revision.Revision
}

// Skipped is a referenced object adopt leaves alone.
type Skipped struct {
	Ref    refs.Ref
	Reason string
}

func (s Skipped) String() string { return fmt.Sprintf("%s: left alone: %s", s.Ref, s.Reason) }

// Read reads the workload, its revisions and the metadata of every config object they reference, and
// decides what adopting takes. It refuses (ErrInvalid) what it cannot adopt safely.
func Read(ctx context.Context, c *kube.Clients, w Workload) (*Plan, error) {
	owner, err := readWorkload(ctx, c, w)
	if err != nil {
		return nil, err
	}
	p := &Plan{Workload: w, Owner: deployedBy(owner)}
	users, err := revisionsOf(ctx, c, w, owner.GetUID())
	if err != nil {
		return nil, err
	}
	used := map[refs.Ref][]*revision.Revision{}
	for _, u := range users {
		rev := u.Revision()
		if rev.Deleting {
			continue // on its way out: its config would be garbage with it
		}
		p.Revisions = append(p.Revisions, rev)
		for _, r := range u.Refs {
			used[r] = append(used[r], rev)
		}
	}
	if len(p.Revisions) == 0 {
		return nil, fmt.Errorf("%w: %s has no revisions yet: wait until its controller has created them, then run adopt again", ErrInvalid, w)
	}
	names := make([]refs.Ref, 0, len(used))
	for r := range used {
		names = append(names, r)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	for _, r := range names {
		m, err := c.Metadata.Resource(r.Kind.GVR()).Namespace(w.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			p.Skipped = append(p.Skipped, Skipped{Ref: r, Reason: "not found (nothing to keep)"})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s %s/%s: %w", r.Kind, w.Namespace, r.Name, err)
		}
		o, skip, err := p.decide(r, m)
		if err != nil {
			return nil, err
		}
		if skip != "" {
			p.Skipped = append(p.Skipped, Skipped{Ref: r, Reason: skip})
			continue
		}
		o.UsedBy = used[r]
		p.Objects = append(p.Objects, o)
	}
	return p, nil
}

// decide says whether an object is adopted and what it lacks. Only objects deployed the way the
// workload is are adopted: the upgrade deletes no other, and an object someone else deploys (another
// release's Secret, a hand-made ConfigMap) must never become garbage because this workload's revisions
// went away.
func (p *Plan) decide(r refs.Ref, m *metav1.PartialObjectMetadata) (*Object, string, error) {
	switch {
	case m.DeletionTimestamp != nil:
		return nil, "being deleted", nil
	case m.Labels[api.RevisionedLabel] != "" && !api.OptedIn(m.Labels):
		return nil, fmt.Sprintf("opted out (%s=%s)", api.RevisionedLabel, m.Labels[api.RevisionedLabel]), nil
	}
	if by := deployedBy(m); by != p.Owner {
		return nil, fmt.Sprintf("deployed by %s, %s by %s: upgrading %s does not delete it",
			orNothing(by), p.Workload, orNothing(p.Owner), p.Workload.Name), nil
	}
	if v, ok := m.Annotations[ResourcePolicyAnnotation]; ok && v != KeepPolicy {
		return nil, "", fmt.Errorf("%w: %s %s/%s has %s=%s: set it to %s or remove it, then run adopt again",
			ErrInvalid, r.Kind, m.Namespace, m.Name, ResourcePolicyAnnotation, v, KeepPolicy)
	}
	return &Object{
		Object:   attach.Object{Kind: r.Kind, Meta: m},
		AddLabel: !api.OptedIn(m.Labels),
		AddKeep:  m.Annotations[ResourcePolicyAnnotation] != KeepPolicy,
	}, "", nil
}

func orNothing(s string) string {
	if s == "" {
		return "nothing we can tell"
	}
	return s
}

// deployedBy names what deploys an object, as its metadata says: a Helm release (the annotations Helm
// 3 writes), else an Argo CD application (its tracking annotation), else "".
func deployedBy(m metav1.Object) string {
	a := m.GetAnnotations()
	if name := a["meta.helm.sh/release-name"]; name != "" {
		return fmt.Sprintf("Helm release %s/%s", a["meta.helm.sh/release-namespace"], name)
	}
	if id := a["argocd.argoproj.io/tracking-id"]; id != "" {
		app, _, _ := strings.Cut(id, ":")
		return "Argo CD application " + app
	}
	return ""
}

// readWorkload gets the workload itself: its uid finds its revisions, its metadata what deploys it.
func readWorkload(ctx context.Context, c *kube.Clients, w Workload) (metav1.Object, error) {
	var (
		obj metav1.Object
		err error
	)
	switch w.Kind {
	case caches.Deployment:
		obj, err = c.Kube.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	case caches.StatefulSet:
		obj, err = c.Kube.AppsV1().StatefulSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	case caches.DaemonSet:
		obj, err = c.Kube.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	case caches.Rollout:
		obj, err = c.Dynamic.Resource(workload.RolloutGVR).Namespace(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	default:
		return nil, fmt.Errorf("%w: %s is not a kind adopt follows", ErrInvalid, w.Kind)
	}
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s not found: check the name and the namespace (-n)", ErrInvalid, w)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", w, err)
	}
	return obj, nil
}

// revisionsOf lists the revision objects the workload controls — ReplicaSets for Deployments and
// Rollouts, ControllerRevisions for StatefulSets and DaemonSets — reduced as the controller's caches
// reduce them, oldest first.
func revisionsOf(ctx context.Context, c *kube.Clients, w Workload, uid types.UID) ([]*caches.User, error) {
	var objs []any
	switch w.Kind {
	case caches.Deployment, caches.Rollout:
		list, err := c.Kube.AppsV1().ReplicaSets(w.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing the ReplicaSets of %s: %w", w, err)
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	default:
		list, err := c.Kube.AppsV1().ControllerRevisions(w.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing the ControllerRevisions of %s: %w", w, err)
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
	var users []*caches.User
	for _, o := range objs {
		if owner := metav1.GetControllerOfNoCopy(o.(metav1.Object)); owner == nil || owner.UID != uid {
			continue
		}
		u, err := caches.Reduce(o)
		if err != nil {
			return nil, err
		}
		users = append(users, u)
	}
	sort.Slice(users, func(i, j int) bool {
		if users[i].Number != users[j].Number {
			return users[i].Number < users[j].Number
		}
		return users[i].Name < users[j].Name
	})
	return users, nil
}
