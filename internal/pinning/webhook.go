package pinning

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Path is where the webhook is served.
const Path = "/pin-pods"

// Webhook rewrites a new pod's references to pinned objects into its revision's snapshots. Its pod
// path reads caches only; it writes (takes a snapshot itself) only when the pod arrives before the
// controller has pinned the revision, and never on a dry run.
type Webhook struct {
	Caches *caches.Caches
	Taker  *Taker
	// Log is the serving process's logger: requests arrive with the HTTP server's context.
	Log *slog.Logger
	// Metrics, optional, gets each admission's duration and every API call on the pod path.
	Metrics *metrics.Metrics
}

var podResource = metav1.GroupVersionResource{Version: "v1", Resource: "pods"}

// maxReviewBytes bounds the body read: kube-apiserver takes requests of at most 3 MiB, so a pod's
// review (the pod once, on CREATE) is below it with room for the review's own fields.
const maxReviewBytes = 4 << 20

func (w *Webhook) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(rw, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, req.Body, maxReviewBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		http.Error(rw, fmt.Sprintf("an AdmissionReview is at most %d bytes", maxReviewBytes), http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(rw, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	start := time.Now()
	resp, err := w.Admit(req.Context(), review.Request)
	if err != nil {
		// Not a denial: an answer the API server cannot use, so the configuration's failurePolicy
		// decides, as for a webhook that is down. Fail refuses the pod; Ignore admits it unpinned
		// (the audit reports it). A denial would refuse it under Ignore too.
		w.admitted(metrics.OutcomeError, start)
		writeError(rw, err)
		return
	}
	outcome := metrics.OutcomeUnchanged
	if resp.Patch != nil {
		outcome = metrics.OutcomePinned
	}
	w.admitted(outcome, start)
	resp.UID = review.Request.UID
	review.Response, review.Request = resp, nil
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(&review)
}

func (w *Webhook) admitted(outcome string, start time.Time) {
	if w.Metrics != nil {
		w.Metrics.Admitted(outcome, time.Since(start))
	}
}

// writeError answers 500 with a Status the API server quotes in its own error.
func writeError(rw http.ResponseWriter, err error) {
	status := metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError, Message: "configmap-attacher pinning: " + err.Error()}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(http.StatusInternalServerError)
	_ = json.NewEncoder(rw).Encode(&status)
}

// Admit decides one admission request. An error means it could not decide (the pinned object or the
// API server could not be read, say): the caller answers so that the failurePolicy applies.
func (w *Webhook) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Resource != podResource || req.Operation != admissionv1.Create || req.SubResource != "" {
		return allow, nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return nil, fmt.Errorf("decoding the pod: %w", err)
	}
	pod.Namespace = req.Namespace // unset in the request's object when the client left it out
	dryRun := req.DryRun != nil && *req.DryRun
	patch, pinned, err := w.pin(w.ctx(ctx), &pod, dryRun)
	if err != nil || len(patch) == 0 {
		return allow, err
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	jsonPatch := admissionv1.PatchTypeJSONPatch
	allow.Patch, allow.PatchType = body, &jsonPatch
	allow.AuditAnnotations = map[string]string{"pinned": strings.Join(pinned, ",")}
	return allow, nil
}

func (w *Webhook) ctx(ctx context.Context) context.Context {
	if w.Log != nil {
		return logging.NewContext(ctx, w.Log)
	}
	return ctx
}

// patchOp is one JSON Patch operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value string `json:"value"`
}

// pin returns the JSON Patch that points the pod's references to pinned objects at its revision's
// snapshots. A pod already rewritten (webhook reinvocation) references snapshots, not pinned objects,
// and gets an empty patch.
//
// An object whose pin label went away (a post-renderer or a patch dropped it) is no longer
// snapshotted, but a revision pinned to it before keeps its snapshot: the pin is the ownership, so a
// spot-replaced pod of that revision still reads what its revision was created with. Revisions
// without a snapshot read the object itself (the controller reports them: ReasonPinRemoved).
func (w *Webhook) pin(ctx context.Context, pod *corev1.Pod, dryRun bool) ([]patchOp, []string, error) {
	p := w.Caches.Pinning
	if p == nil {
		return nil, nil, nil
	}
	if on, err := w.enabled(ctx, pod.Namespace); err != nil || !on {
		return nil, nil, err
	}
	var rev *revision.Revision
	var patch []patchOp
	var pinned []string
	done := map[refs.Ref]string{}
	for _, use := range refs.Uses(&pod.Spec) {
		pin, labelled := p.Pin(pod.Namespace, use.Ref)
		if !labelled && len(p.SnapshotsOf(pod.Namespace, use.Ref)) == 0 {
			continue
		}
		if !use.Path.InVolumesOrEnv() {
			continue // an imagePullSecret: registry credentials must stay current
		}
		name, seen := done[use.Ref]
		if !seen {
			if rev == nil {
				var err error
				if rev, err = w.revisionOf(ctx, pod); err != nil || rev == nil {
					return nil, nil, err // not a revision's pod: nothing to pin it to
				}
			}
			if labelled {
				var err error
				if name, err = w.snapshot(ctx, rev, use.Ref, pin, dryRun); err != nil {
					return nil, nil, err
				}
			} else {
				name, _ = p.Snapshot(rev.Namespace, string(rev.UID), use.Ref) // "": never pinned, reads the object
			}
			done[use.Ref] = name
			if name != "" {
				pinned = append(pinned, fmt.Sprintf("%s/%s=%s", strings.ToLower(string(use.Kind)), use.Name, name))
			}
		}
		if name != "" {
			patch = append(patch, patchOp{Op: "replace", Path: "/spec" + pointer(use.Path), Value: name})
		}
	}
	return patch, pinned, nil
}

// enabled reports whether the namespace has pinning on. The API server calls the webhook only for
// namespaces its own view shows labelled; when our cache disagrees, it has not seen the label yet (a
// namespace labelled a moment ago), so the namespace is read: pods created right after pinning is
// turned on are pinned too. Read by a list of that one name, not a get: the controller may list and
// watch namespaces (its cache), and a namespaced install may do nothing more.
func (w *Webhook) enabled(ctx context.Context, namespace string) (bool, error) {
	if w.Caches.Pinning.Enabled(namespace) {
		return true, nil
	}
	w.apiCall(metrics.CallGetNamespace)
	list, err := w.Taker.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", namespace).String()})
	if err != nil {
		return false, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	for _, n := range list.Items {
		if n.Name == namespace {
			return n.Labels[api.PinningNamespaceLabel] == api.PinningEnabled, nil
		}
	}
	return false, nil
}

// snapshot finds the revision's pin for r, or takes it: the controller normally has (it sees a new
// ReplicaSet within milliseconds), but the first pod can be faster. "" means r is not pinned after all:
// our cache still showed it labelled, or still showed it, when the pod came.
func (w *Webhook) snapshot(ctx context.Context, rev *revision.Revision, r refs.Ref, cached any, dryRun bool) (string, error) {
	if name, ok := w.Caches.Pinning.Snapshot(rev.Namespace, string(rev.UID), r); ok {
		return name, nil
	}
	if dryRun {
		obj, ok := cached.(metav1.Object)
		if !ok {
			return "", fmt.Errorf("cached %s is a %T", r, cached)
		}
		return DryRunName(obj)
	}
	logging.FromContext(ctx).Info("the pod came before its revision was pinned: snapshotting now", "revision", rev.String(), "object", r.String())
	w.apiCall(metrics.CallTakeSnapshot)
	name, err := w.Taker.Take(ctx, rev, r)
	if errors.Is(err, ErrNotPinned) || errors.Is(err, ErrNotPinnable) || apierrors.IsNotFound(err) {
		logging.FromContext(ctx).Info("no longer pinned, or gone: the pod keeps its reference", "revision", rev.String(), "object", r.String(), "reason", err)
		return "", nil
	}
	return name, err
}

// revisionOf names the revision a pod is made from: its controlling ReplicaSet (known by uid even
// before the pod has a name), or the ControllerRevision its StatefulSet or DaemonSet labelled it with.
// nil for other pods, and for a pod whose revision cannot be found, in our cache or by a read: the
// review's ownerReference is the caller's word, and snapshots are made and owned for revisions that
// exist, never for a uid anyone could invent.
func (w *Webhook) revisionOf(ctx context.Context, pod *corev1.Pod) (*revision.Revision, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return nil, nil
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil || gv.Group != appsv1.GroupName {
		return nil, nil
	}
	apps := appsv1.SchemeGroupVersion.String()
	switch owner.Kind {
	case "ReplicaSet":
		if ok, err := w.replicaSetExists(ctx, pod.Namespace, owner.Name, owner.UID); err != nil || !ok {
			return nil, err
		}
		return &revision.Revision{APIVersion: apps, Kind: "ReplicaSet", Namespace: pod.Namespace, Name: owner.Name, UID: owner.UID}, nil
	case "StatefulSet", "DaemonSet":
		hash := pod.Labels[appsv1.ControllerRevisionHashLabelKey]
		if hash == "" {
			return nil, nil
		}
		name := hash // a StatefulSet labels its pods with the revision's name
		if owner.Kind == "DaemonSet" {
			name = owner.Name + "-" + hash // a DaemonSet, with the hash alone
		}
		uid, err := w.controllerRevisionUID(ctx, pod.Namespace, name, owner.UID)
		if err != nil || uid == "" {
			return nil, err
		}
		return &revision.Revision{APIVersion: apps, Kind: "ControllerRevision", Namespace: pod.Namespace, Name: name, UID: uid}, nil
	}
	return nil, nil
}

// replicaSetExists reports whether the ReplicaSet ns/name with this uid exists: in the cache, or, when
// the cache has not seen it yet (the pod raced its ReplicaSet), on the API server.
func (w *Webhook) replicaSetExists(ctx context.Context, ns, name string, uid types.UID) (bool, error) {
	if inf, ok := w.Caches.Users[caches.ReplicaSet]; ok {
		if u, exists, err := inf.Get(ns, name); err == nil && exists && u.UID == uid {
			return true, nil
		}
	}
	w.apiCall(metrics.CallGetReplicaSet)
	rs, err := w.Taker.Kube.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading ReplicaSet %s/%s: %w", ns, name, err)
	}
	return rs.UID == uid, nil
}

// controllerRevisionUID finds the uid of the named ControllerRevision of owner: from the cache, or,
// when the cache has not seen it yet (the pod raced its revision), from the API server.
func (w *Webhook) controllerRevisionUID(ctx context.Context, ns, name string, owner types.UID) (types.UID, error) {
	if inf, ok := w.Caches.Users[caches.ControllerRevision]; ok {
		if u, exists, err := inf.Get(ns, name); err == nil && exists {
			if c := u.Owner; c != nil && c.UID == owner {
				return u.UID, nil
			}
		}
	}
	w.apiCall(metrics.CallGetControllerRevision)
	cr, err := w.Taker.Kube.AppsV1().ControllerRevisions(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading ControllerRevision %s/%s: %w", ns, name, err)
	}
	if c := metav1.GetControllerOf(cr); c == nil || c.UID != owner {
		return "", nil
	}
	return cr.UID, nil
}

func (w *Webhook) apiCall(call string) {
	if w.Metrics != nil {
		w.Metrics.WebhookAPICall(call)
	}
}

// pointer turns a refs.Path into a JSON Pointer (RFC 6901).
func pointer(p refs.Path) string {
	var b strings.Builder
	for _, e := range p {
		b.WriteByte('/')
		switch v := e.(type) {
		case int:
			b.WriteString(strconv.Itoa(v))
		default:
			b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(fmt.Sprint(v)))
		}
	}
	return b.String()
}
