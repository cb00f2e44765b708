package framework

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Flux on the local cluster: hack/cluster/flux.sh runs source-controller and helm-controller, so
// HelmRepositories and HelmReleases are plain custom resources created through the Kubernetes API.
// Charts come from a Helm repository served on loopback (ServeChartRepo).

// FluxNamespace is where hack/cluster/flux.sh runs Flux; sources may live anywhere.
const FluxNamespace = "flux-system"

var (
	// HelmReleaseGVR is Flux's HelmRelease resource.
	HelmReleaseGVR = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
	// HelmRepositoryGVR is Flux's HelmRepository resource.
	HelmRepositoryGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "helmrepositories"}
)

// EnsureFlux runs `hack/cluster/flux.sh up` for this cluster: it applies Flux's CRDs and starts (or
// reuses) source-controller and helm-controller. The cluster must be a local one made by
// hack/cluster/up.sh. Progress lines go to progress.
func (c *Cluster) EnsureFlux(ctx context.Context, progress io.Writer) error {
	return c.clusterScript(ctx, progress, "flux.sh", "up")
}

// StopFlux runs `hack/cluster/flux.sh down`: the controllers stop, HelmReleases stay.
func (c *Cluster) StopFlux(ctx context.Context, progress io.Writer) error {
	return c.clusterScript(ctx, progress, "flux.sh", "down")
}

// ApplyHelmRepository creates (or points at url) a HelmRepository in ns, as `flux create source helm`
// does. Flux reads its index every interval; a HelmRelease asking for a chart version reads it at once.
func (c *Cluster) ApplyHelmRepository(ctx context.Context, ns, name, url string, interval time.Duration) error {
	spec := map[string]any{"url": url, "interval": interval.String()}
	return c.applySpec(ctx, HelmRepositoryGVR, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}})
}

// RolloutHealthChecks are a HelmRelease's spec.healthCheckExprs (CEL on the object) for Argo
// Rollouts: kstatus, which Flux waits with, knows no Rollout. A paused canary is in progress, an
// aborted one failed, and only a Rollout whose controller has seen the current spec and calls it
// Healthy is current. So Flux's upgrade lasts as long as the canary, its post-upgrade hooks run after
// the promotion, and an abort fails the upgrade (remediation then rolls the release back).
func RolloutHealthChecks() []any {
	return []any{map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"inProgress": "status.observedGeneration != string(metadata.generation) || status.phase in ['Progressing', 'Paused']",
		"failed":     "status.observedGeneration == string(metadata.generation) && status.phase == 'Degraded'",
		"current":    "status.observedGeneration == string(metadata.generation) && status.phase == 'Healthy'",
	}}
}

// HelmRelease is a Flux HelmRelease of one chart of a HelmRepository, released under its own name in
// its own namespace.
type HelmRelease struct {
	Name, Namespace string
	Repository      string // a HelmRepository in FluxNamespace
	Chart, Version  string
	Values          map[string]any
	// Interval is how often Flux reconciles it (drift detection runs then); 1m when zero.
	Interval time.Duration
	// Spec holds further spec fields as Flux spells them (timeout, upgrade, postRenderers,
	// driftDetection, healthCheckExprs, ...); they win over the fields above.
	Spec map[string]any
}

// Object renders the HelmRelease as an unstructured object.
func (r HelmRelease) Object() *unstructured.Unstructured {
	interval := r.Interval
	if interval == 0 {
		interval = time.Minute
	}
	spec := map[string]any{
		"interval": interval.String(),
		"chart": map[string]any{"spec": map[string]any{
			"chart": r.Chart, "version": r.Version, "interval": interval.String(),
			"sourceRef": map[string]any{"kind": "HelmRepository", "name": r.Repository, "namespace": FluxNamespace},
		}},
	}
	if r.Values != nil {
		spec["values"] = r.Values
	}
	for k, v := range r.Spec {
		spec[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
		"metadata": map[string]any{"name": r.Name, "namespace": r.Namespace},
		"spec":     spec,
	}}
}

// ApplyHelmRelease creates the HelmRelease, or replaces the spec of an existing one.
func (c *Cluster) ApplyHelmRelease(ctx context.Context, r HelmRelease) error {
	return c.applySpec(ctx, HelmReleaseGVR, r.Object())
}

// SetHelmReleaseValues replaces the HelmRelease's values as a whole (what a commit changing them in Git
// does once Flux applied it): helm-controller upgrades the release at once.
func (c *Cluster) SetHelmReleaseValues(ctx context.Context, ns, name string, values map[string]any) error {
	return c.updateObject(ctx, HelmReleaseGVR, ns, name, func(hr *unstructured.Unstructured) error {
		return unstructured.SetNestedField(hr.Object, values, "spec", "values")
	})
}

// SetHelmReleaseSpec sets one spec field of the HelmRelease (e.g. "postRenderers").
func (c *Cluster) SetHelmReleaseSpec(ctx context.Context, ns, name, field string, value any) error {
	return c.updateObject(ctx, HelmReleaseGVR, ns, name, func(hr *unstructured.Unstructured) error {
		return unstructured.SetNestedField(hr.Object, value, "spec", field)
	})
}

// RequestReconcile asks Flux to reconcile the HelmRelease now, as `flux reconcile helmrelease` does
// (the annotation reconcile.fluxcd.io/requestedAt); it returns the token to wait for in
// FluxStatus.HandledAt.
func (c *Cluster) RequestReconcile(ctx context.Context, ns, name string) (string, error) {
	token := time.Now().UTC().Format(time.RFC3339Nano)
	return token, c.updateObject(ctx, HelmReleaseGVR, ns, name, func(hr *unstructured.Unstructured) error {
		a := hr.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a["reconcile.fluxcd.io/requestedAt"] = token
		hr.SetAnnotations(a)
		return nil
	})
}

// FluxStatus is what a HelmRelease's status says, flattened.
type FluxStatus struct {
	// Current is true when Flux has reconciled the spec as it is now (status.observedGeneration, set
	// once a reconciliation ends); Attempted, when it has started to (status.lastAttemptedGeneration,
	// set before it runs a Helm action, which may wait for long).
	Current, Attempted bool
	// Conditions by type (Ready, Released, Remediated, TestSuccess, Drifted): status, reason and message.
	Conditions map[string]FluxCondition
	// History is status.history, newest first: the releases Flux made.
	History []FluxRelease
	// LastAction is status.lastAttemptedReleaseAction (install, upgrade); Failures is status.failures.
	LastAction string
	Failures   int64
	// HandledAt is status.lastHandledReconcileAt: the last reconcile request (RequestReconcile) handled.
	HandledAt string
}

// FluxCondition is one status condition.
type FluxCondition struct{ Status, Reason, Message string }

// FluxRelease is one entry of status.history: a Helm release Flux made.
type FluxRelease struct {
	Version      int64  // the Helm release revision
	Status       string // deployed, superseded, failed, uninstalled, ...
	ChartVersion string
	Action       string // the action that made it, when Flux records it
}

// Is reports whether condition typ has status "True".
func (s FluxStatus) Is(typ string) bool { return s.Conditions[typ].Status == "True" }

// Ready reports whether Flux has reconciled the current spec and the release is Ready.
func (s FluxStatus) Ready() bool { return s.Current && s.Is("Ready") }

func (s FluxStatus) String() string {
	var conds []string
	for _, typ := range []string{"Ready", "Released", "Remediated", "Drifted"} {
		if c, ok := s.Conditions[typ]; ok {
			conds = append(conds, fmt.Sprintf("%s=%s (%s: %q)", typ, c.Status, c.Reason, c.Message))
		}
	}
	var hist []string
	for _, h := range s.History {
		hist = append(hist, fmt.Sprintf("v%d %s", h.Version, h.Status))
	}
	return fmt.Sprintf("current=%t attempted=%t %s; history [%s]; last action %s, failures %d", s.Current, s.Attempted, strings.Join(conds, ", "),
		strings.Join(hist, ", "), s.LastAction, s.Failures)
}

// HelmReleaseStatus reads a HelmRelease's status.
func (c *Cluster) HelmReleaseStatus(ctx context.Context, ns, name string) (FluxStatus, error) {
	hr, err := c.Dynamic.Resource(HelmReleaseGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return FluxStatus{}, err
	}
	o := hr.Object
	str := func(m map[string]any, path ...string) string {
		v, _, _ := unstructured.NestedString(m, path...)
		return v
	}
	observed, _, _ := unstructured.NestedInt64(o, "status", "observedGeneration")
	attempted, _, _ := unstructured.NestedInt64(o, "status", "lastAttemptedGeneration")
	s := FluxStatus{
		Current:    observed == hr.GetGeneration(),
		Attempted:  attempted == hr.GetGeneration(),
		Conditions: map[string]FluxCondition{},
		LastAction: str(o, "status", "lastAttemptedReleaseAction"),
		HandledAt:  str(o, "status", "lastHandledReconcileAt"),
	}
	s.Failures, _, _ = unstructured.NestedInt64(o, "status", "failures")
	conds, _, _ := unstructured.NestedSlice(o, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		s.Conditions[str(m, "type")] = FluxCondition{Status: str(m, "status"), Reason: str(m, "reason"), Message: str(m, "message")}
	}
	history, _, _ := unstructured.NestedSlice(o, "status", "history")
	for _, h := range history {
		m, _ := h.(map[string]any)
		v, _, _ := unstructured.NestedInt64(m, "version")
		s.History = append(s.History, FluxRelease{Version: v, Status: str(m, "status"), ChartVersion: str(m, "chartVersion"), Action: str(m, "action")})
	}
	return s, nil
}

// WaitHelmRelease polls the HelmRelease until cond holds for its status.
func (c *Cluster) WaitHelmRelease(ctx context.Context, timeout time.Duration, ns, name, what string, cond func(FluxStatus) bool) (FluxStatus, error) {
	var last FluxStatus
	err := Eventually(ctx, timeout, "HelmRelease "+ns+"/"+name+" "+what, func(ctx context.Context) (bool, string, error) {
		s, err := c.HelmReleaseStatus(ctx, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		last = s
		return cond(s), s.String(), nil
	})
	return last, err
}

// WaitHelmReleaseReady waits until Flux has released the HelmRelease's current spec and it is Ready.
func (c *Cluster) WaitHelmReleaseReady(ctx context.Context, timeout time.Duration, ns, name string) (FluxStatus, error) {
	return c.WaitHelmRelease(ctx, timeout, ns, name, "to be Ready for its current spec", FluxStatus.Ready)
}

// DeleteHelmRelease deletes the HelmRelease and waits until it is gone: helm-controller uninstalls the
// release first (its finalizer), deleting what the chart made except what Helm keeps.
func (c *Cluster) DeleteHelmRelease(ctx context.Context, timeout time.Duration, ns, name string) error {
	res := c.Dynamic.Resource(HelmReleaseGVR).Namespace(ns)
	if err := res.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return Eventually(ctx, timeout, "HelmRelease "+ns+"/"+name+" to be deleted", func(ctx context.Context) (bool, string, error) {
		_, err := res.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
}
