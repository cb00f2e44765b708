package oneshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// ErrTimeout means the workload's current ReplicaSet never came to reference every named object.
var ErrTimeout = errors.New("timed out")

// recheckEvery bounds how stale our view of config objects gets: we watch the workload and its
// ReplicaSets, but only GET config objects (watching Secrets would need list on all of them).
const recheckEvery = 2 * time.Second

// Run attaches the named objects to the workload's current ReplicaSet. Nothing is written unless every
// check passed and the server accepted every change in a dry run.
func Run(ctx context.Context, o *Options, clients *kube.Clients, stdout io.Writer) error {
	ref := o.Workload()
	targets := o.Targets()
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("workload", ref.String()))
	log := logging.FromContext(ctx)

	if err := reachNamespace(ctx, clients, ref.Namespace); err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	get := func(ctx context.Context, t refs.Ref) (*metav1.PartialObjectMetadata, error) {
		return clients.Metadata.Resource(t.Kind.GVR()).Namespace(ref.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	}
	var pending []string // what the last check that finished was waiting for
	timedOut := func(err error) error {
		return checkFailed(ctx.Err(), waitCtx.Err(), o.Timeout, ref, pending, err)
	}

	// Most runs find the ReplicaSet already in place: a few reads, sent at once, decide, and watches
	// start only when there is something to wait for.
	direct := &narrowSource{ClientSource: workload.ClientSource{Kube: clients.Kube, Dynamic: clients.Dynamic},
		raw: clients.Kube.CoreV1().RESTClient(), ref: ref}
	r, err := checkReady(waitCtx, direct, get, ref, targets)
	if err != nil {
		return timedOut(err)
	}
	if r.Ready() {
		return attachTo(ctx, o, clients, r, stdout)
	}
	pending = r.Pending
	log.Info("waiting", "for", r.Pending)
	w, err := startWatcher(waitCtx, clients, ref, r.WorkloadRef)
	if err != nil {
		if waitCtx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%w after %s starting watches on %s", ErrTimeout, o.Timeout, ref)
		}
		return err
	}
	ticker := time.NewTicker(recheckEvery)
	defer ticker.Stop()
	last := strings.Join(r.Pending, "; ")
	for {
		select {
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w after %s waiting for %s: %s", ErrTimeout, o.Timeout, ref, strings.Join(r.Pending, "; "))
		case <-w.changed:
		case <-ticker.C:
		}
		next, err := checkReady(waitCtx, w, get, ref, targets)
		if err != nil {
			return timedOut(err)
		}
		if next.Ready() {
			return attachTo(ctx, o, clients, next, stdout)
		}
		r, pending = next, next.Pending
		if now := strings.Join(r.Pending, "; "); now != last {
			log.Info("waiting", "for", r.Pending)
			last = now
		}
	}
}

// checkFailed is the error of a check that failed with err. A check cut short by the wait's own deadline
// is the timeout: it names what the last finished check was waiting for (the read the deadline cut says
// nothing about the objects, and a run that waited for a missing ConfigMap must say so), or err when
// no check finished yet.
//
//	parent done | wait's deadline passed | pending | error
//	yes         | -                      | -       | err (the caller stopped us)
//	no          | no                     | -       | err
//	no          | yes                    | none    | ErrTimeout: err
//	no          | yes                    | some    | ErrTimeout waiting for ref: pending
func checkFailed(parentErr, waitErr error, timeout time.Duration, ref workload.Ref, pending []string, err error) error {
	switch {
	case parentErr != nil || waitErr == nil:
		return err
	case len(pending) == 0:
		return fmt.Errorf("%w after %s: %v", ErrTimeout, timeout, err)
	default:
		return fmt.Errorf("%w after %s waiting for %s: %s", ErrTimeout, timeout, ref, strings.Join(pending, "; "))
	}
}

// attachTo runs the one attach step on the current ReplicaSet: validated by a server-side dry run
// before the first write, so a refusal leaves everything as it was.
func attachTo(ctx context.Context, o *Options, clients *kube.Clients, r *readiness, stdout io.Writer) error {
	rev := revision.FromReplicaSet(r.ReplicaSet)
	log := logging.FromContext(ctx).With("replicaSet", rev.Name)
	names := make([]string, len(r.Objects))
	for i, obj := range r.Objects {
		names[i] = obj.String()
	}
	log.Info("resolved current ReplicaSet", "uid", rev.UID, "revision", rev.Number, "objects", names)
	for _, obj := range r.Objects {
		if !api.OptedIn(obj.Meta.Labels) {
			// Attached anyway, as the original tool did: a Job names what it attaches.
			log.Warn("not labelled "+api.RevisionedLabel+"=true: attaching it anyway, as the original tool did; it will be "+
				"deleted with the last ReplicaSet using it even if something else still uses it, and the controller's "+
				"in-use protection does not cover it: label it to opt it in", "object", obj.String())
		}
	}

	hostname, _ := os.Hostname()
	writer := &attach.Writer{Client: clients.Metadata, Events: &attach.SyncEvents{Client: clients.Kube, Instance: hostname}}
	res, err := writer.Attach(ctx, rev, r.Objects, attach.Options{Validate: true, DryRun: o.DryRun})
	if res != nil {
		for _, obj := range res.Owned {
			log.Info("already attached", "object", obj.String())
			if o.DryRun {
				fmt.Fprintf(stdout, "%s: already attached to %s\n", obj, rev)
			}
		}
	}
	switch {
	case errors.Is(err, attach.ErrInvalid):
		return err
	case err != nil && len(res.Written) == 0:
		return explainWrite(err)
	case err != nil:
		return fmt.Errorf("attached %d of %d objects, then: %w", len(res.Written), len(res.Planned), explainWrite(err))
	case len(res.Gone) > 0:
		return fmt.Errorf("%s was deleted while being attached; attached %d of %d objects", res.Gone[0].Object, len(res.Written), len(res.Planned))
	case len(res.Planned) == 0:
		log.Info("nothing to do")
	case o.DryRun:
		for _, c := range res.Planned {
			fmt.Fprintln(stdout, c.Describe())
		}
		log.Info("dry run: nothing written", "changes", len(res.Planned))
	default:
		log.Info("done", "attached", len(res.Written))
	}
	return nil
}

// reachNamespace fails fast on a namespace that does not exist, and its read doubles as the probe that
// the API server is reachable: only a read that got no answer about the namespace (no connection,
// unauthorized, ...) falls back to kube.WaitReachable's bounded retries, and then reads again, so every
// failure reads as it would with the probe first. The original tool's RBAC has no access to
// namespaces; then we skip the check and the workload lookup reports the problem instead.
func reachNamespace(ctx context.Context, clients *kube.Clients, ns string) error {
	err := checkNamespace(ctx, clients, ns)
	if !errors.As(err, new(noAnswer)) {
		return err
	}
	if err := kube.WaitReachable(ctx, clients.Kube, clients.Config.Host); err != nil {
		return err
	}
	return checkNamespace(ctx, clients, ns)
}

// noAnswer marks a namespace read that said nothing about the namespace; its message is the error's.
type noAnswer struct{ error }

func (e noAnswer) Unwrap() error { return e.error }

func checkNamespace(ctx context.Context, clients *kube.Clients, ns string) error {
	_, err := clients.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil:
		logging.FromContext(ctx).Debug("API server reachable", "host", clients.Config.Host)
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %q not found: check -namespace", ns)
	case apierrors.IsForbidden(err):
		logging.FromContext(ctx).Debug("cannot get namespaces; skipping the namespace check", "namespace", ns)
		return nil
	}
	return fmt.Errorf("reading namespace %s: %w", ns, noAnswer{err})
}

// narrowSource reads like workload.ClientSource but lists only the ReplicaSets that can be the
// workload's current one, so a run costs the same in a namespace of thousands of ReplicaSets: for a
// Rollout those labelled with the pod-template hash its status names, for a Deployment those its
// selector matches. workload.Resolve reads the workload before listing, and still keeps only the
// ReplicaSets the workload owns (by uid); the current one is in the narrowed list whenever it is in the
// full one.
type narrowSource struct {
	workload.ClientSource
	// raw reads the Rollout as JSON (see Rollout); nil reads it through the dynamic client.
	raw      rest.Interface
	ref      workload.Ref
	selector string // "" lists every ReplicaSet
}

// Rollout decodes the JSON straight into the fields the Job reads: through the dynamic client, the
// unstructured-to-struct conversion of a Rollout's pod template was the largest CPU cost of a re-run
// (about 3 ms of 23). Unknown fields are ignored, as in workload.RolloutFromUnstructured.
func (s *narrowSource) Rollout(ctx context.Context, namespace, name string) (*workload.RolloutObject, error) {
	ro, err := s.readRollout(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	if s.ref.Kind == workload.Rollout && ro.Status.CurrentPodHash != "" {
		s.selector = labels.Set{workload.RolloutHashLabel: ro.Status.CurrentPodHash}.String()
	}
	return ro, nil
}

func (s *narrowSource) readRollout(ctx context.Context, namespace, name string) (*workload.RolloutObject, error) {
	if s.raw == nil {
		return s.ClientSource.Rollout(ctx, namespace, name)
	}
	gvr := workload.RolloutGVR
	raw, err := s.raw.Get().AbsPath("/apis", gvr.Group, gvr.Version, "namespaces", namespace, gvr.Resource, name).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	// Everything but the pod template: the Job checks the ReplicaSet's template, never the Rollout's,
	// and decoding a PodTemplateSpec (its reflection, the first time) is what costs.
	var ro struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Replicas             *int32              `json:"replicas,omitempty"`
			WorkloadRef          *workload.ObjectRef `json:"workloadRef,omitempty"`
			RevisionHistoryLimit *int32              `json:"revisionHistoryLimit,omitempty"`
		} `json:"spec,omitempty"`
		Status workload.RolloutStatus `json:"status,omitempty"`
	}
	if err := json.Unmarshal(raw, &ro); err != nil {
		return nil, fmt.Errorf("decoding Rollout %s/%s: %w", namespace, name, err)
	}
	return &workload.RolloutObject{TypeMeta: ro.TypeMeta, ObjectMeta: ro.ObjectMeta, Status: ro.Status,
		Spec: workload.RolloutSpec{Replicas: ro.Spec.Replicas, WorkloadRef: ro.Spec.WorkloadRef, RevisionHistoryLimit: ro.Spec.RevisionHistoryLimit}}, nil
}

func (s *narrowSource) Deployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, error) {
	d, err := s.ClientSource.Deployment(ctx, namespace, name)
	if err == nil && s.ref.Kind == workload.Deployment && d.Spec.Selector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil && !sel.Empty() {
			s.selector = sel.String()
		}
	}
	return d, err
}

func (s *narrowSource) ReplicaSets(ctx context.Context, namespace string) ([]*appsv1.ReplicaSet, error) {
	list, err := s.Kube.AppsV1().ReplicaSets(namespace).List(ctx, metav1.ListOptions{LabelSelector: s.selector})
	if err != nil {
		return nil, err
	}
	out := make([]*appsv1.ReplicaSet, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func explainWrite(err error) error {
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot set an ownerRef") {
		return fmt.Errorf("%w (with the OwnerReferencesPermissionEnforcement admission plugin, the attacher also needs delete on the object: see docs/rbac.md)", err)
	}
	return kube.Explain(err)
}
