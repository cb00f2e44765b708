package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Argo CD on the local cluster: hack/cluster/argocd.sh runs its application controller and repo
// server (no API server), so Applications are plain custom resources created and synced through the
// Kubernetes API. Charts come from a Helm repository served on loopback (ServeChartRepo).

// ArgoCDNamespace is where hack/cluster/argocd.sh runs Argo CD; Applications must live there.
const ArgoCDNamespace = "argocd"

// InClusterServer is the destination server naming the cluster Argo CD runs against.
const InClusterServer = "https://kubernetes.default.svc"

// ApplicationGVR is Argo CD's Application resource.
var ApplicationGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}

// EnsureArgoCD runs `hack/cluster/argocd.sh up` for this cluster: it applies Argo CD's CRDs and
// settings and starts (or reuses) redis, the repo server and the application controller. The
// cluster must be a local one made by hack/cluster/up.sh (its kubeconfig under
// <KWOK_WORKDIR>/clusters/<name>/). Progress lines go to progress.
func (c *Cluster) EnsureArgoCD(ctx context.Context, progress io.Writer) error {
	return c.argoCDScript(ctx, progress, "up")
}

// StopArgoCD runs `hack/cluster/argocd.sh down`: the components stop, Applications stay.
func (c *Cluster) StopArgoCD(ctx context.Context, progress io.Writer) error {
	return c.argoCDScript(ctx, progress, "down")
}

func (c *Cluster) argoCDScript(ctx context.Context, progress io.Writer, verb string) error {
	return c.clusterScript(ctx, progress, "argocd.sh", verb)
}

// clusterScript runs `hack/cluster/<script> <verb>` (argocd.sh, flux.sh) for this cluster, which must be
// a local one made by hack/cluster/up.sh (its kubeconfig at <KWOK_WORKDIR>/clusters/<name>/).
func (c *Cluster) clusterScript(ctx context.Context, progress io.Writer, script, verb string) error {
	dir := filepath.Dir(c.Kubeconfig)
	if filepath.Base(c.Kubeconfig) != "kubeconfig.yaml" || filepath.Base(filepath.Dir(dir)) != "clusters" {
		return fmt.Errorf("%s %s: %s is not the kubeconfig of a cluster made by hack/cluster/up.sh "+
			"(<KWOK_WORKDIR>/clusters/<name>/kubeconfig.yaml), so there is nothing local to run for it", script, verb, c.Kubeconfig)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "hack/cluster", script), verb)
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+filepath.Base(dir), "KWOK_WORKDIR="+filepath.Dir(filepath.Dir(dir)))
	cmd.Stdout, cmd.Stderr = io.Discard, progress
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/cluster/%s %s: %w", script, verb, err)
	}
	return nil
}

// ChartRepo is a Helm chart repository (index.yaml and chart archives) served over HTTP on
// 127.0.0.1, the way Argo CD's repo server pulls charts from any Helm repository.
type ChartRepo struct {
	URL string // http://127.0.0.1:<port>, an Application's spec.source.repoURL
	Dir string // the served directory

	helm Helm
	srv  *http.Server
	own  bool // Dir was made by ServeChartRepo and goes away with Close
}

// ServeChartRepo starts an empty chart repository on a free loopback port in dir (a new temporary
// directory when dir is ""); Add puts charts in it. Close stops it.
func ServeChartRepo(h Helm, dir string) (*ChartRepo, error) {
	r := &ChartRepo{Dir: dir, helm: h}
	if dir == "" {
		d, err := os.MkdirTemp("", "chart-repo")
		if err != nil {
			return nil, err
		}
		r.Dir, r.own = d, true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.cleanup()
		return nil, err
	}
	r.URL = "http://" + ln.Addr().String()
	r.srv = &http.Server{Handler: http.FileServer(http.Dir(r.Dir)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Add packages a chart directory (`helm package`, with version overriding Chart.yaml's unless "")
// into the repository and rewrites its index.yaml (`helm repo index`). It returns the version added.
func (r *ChartRepo) Add(ctx context.Context, chartDir, version string) (string, error) {
	args := []string{"package", chartDir, "--destination", r.Dir}
	if version != "" {
		args = append(args, "--version", version)
	}
	out, err := r.helm.Run(ctx, args...)
	if err != nil {
		return "", err
	}
	// "Successfully packaged chart and saved it to: <dir>/<name>-<version>.tgz"
	_, pkg, ok := strings.Cut(strings.TrimSpace(out), ": ")
	if !ok {
		return "", fmt.Errorf("helm package printed %q", out)
	}
	if _, err := r.helm.Run(ctx, "repo", "index", r.Dir, "--url", r.URL); err != nil {
		return "", err
	}
	base := strings.TrimSuffix(filepath.Base(pkg), ".tgz")
	return base[strings.LastIndex(base, "-")+1:], nil
}

// Close stops serving (and removes the directory if ServeChartRepo made it).
func (r *ChartRepo) Close() error {
	err := r.srv.Close()
	r.cleanup()
	return err
}

func (r *ChartRepo) cleanup() {
	if r.own {
		_ = os.RemoveAll(r.Dir)
	}
}

// HelmApp is an Application deploying one chart of a Helm repository to this cluster.
type HelmApp struct {
	Name      string         // the Application's name (in ArgoCDNamespace); also the Helm release name
	RepoURL   string         // Helm repository URL, e.g. ChartRepo.URL
	Chart     string         // chart name in that repository
	Version   string         // chart version (spec.source.targetRevision)
	Namespace string         // destination namespace
	Values    map[string]any // spec.source.helm.valuesObject; nil: the chart's defaults
	// Automated turns on automated sync (nil: sync only when asked, see SyncApplication).
	Automated *AutoSync
	// SyncOptions are spec.syncPolicy.syncOptions, e.g. "CreateNamespace=true", "PruneLast=true",
	// "Replace=true", "ServerSideApply=true". SyncApplication uses them too.
	SyncOptions []string
	// Cascade adds Argo CD's resources finalizer: deleting the Application deletes what it deployed.
	Cascade bool
}

// AutoSync is spec.syncPolicy.automated.
type AutoSync struct {
	Prune    bool // delete resources the chart no longer renders
	SelfHeal bool // revert changes made to live resources outside Git/Helm
}

// Object renders the Application as an unstructured object.
func (a HelmApp) Object() *unstructured.Unstructured {
	source := map[string]any{
		"repoURL":        a.RepoURL,
		"chart":          a.Chart,
		"targetRevision": a.Version,
		"helm":           map[string]any{"releaseName": a.Name},
	}
	if a.Values != nil {
		source["helm"].(map[string]any)["valuesObject"] = a.Values
	}
	policy := map[string]any{}
	if a.Automated != nil {
		policy["automated"] = map[string]any{"prune": a.Automated.Prune, "selfHeal": a.Automated.SelfHeal}
	}
	if len(a.SyncOptions) > 0 {
		policy["syncOptions"] = toAnySlice(a.SyncOptions)
	}
	meta := map[string]any{"name": a.Name, "namespace": ArgoCDNamespace}
	if a.Cascade {
		meta["finalizers"] = []any{"resources-finalizer.argocd.argoproj.io/foreground"}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "Application",
		"metadata":   meta,
		"spec": map[string]any{
			"project":     "default",
			"source":      source,
			"destination": map[string]any{"server": InClusterServer, "namespace": a.Namespace},
			"syncPolicy":  policy,
		},
	}}
}

func toAnySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// AppSpec is an Application to apply: a HelmApp or a GitApp.
type AppSpec interface {
	Object() *unstructured.Unstructured
}

// ApplyApplication creates the Application, or replaces the spec of an existing one.
func (c *Cluster) ApplyApplication(ctx context.Context, app AppSpec) error {
	return c.applySpec(ctx, ApplicationGVR, app.Object())
}

// Application returns the Application as it is now.
func (c *Cluster) Application(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	return c.Dynamic.Resource(ApplicationGVR).Namespace(ArgoCDNamespace).Get(ctx, name, metav1.GetOptions{})
}

// PatchApplication applies a JSON merge patch to the Application, e.g.
// {"spec": {"source": {"helm": {"valuesObject": {...}}}}}.
func (c *Cluster) PatchApplication(ctx context.Context, name string, patch map[string]any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.Dynamic.Resource(ApplicationGVR).Namespace(ArgoCDNamespace).Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

// SetApplicationValues replaces the chart values (spec.source.helm.valuesObject) as a whole.
func (c *Cluster) SetApplicationValues(ctx context.Context, name string, values map[string]any) error {
	return c.updateApplication(ctx, name, func(app *unstructured.Unstructured) error {
		return unstructured.SetNestedField(app.Object, values, "spec", "source", "helm", "valuesObject")
	})
}

// updateApplication reads, changes and writes the Application, again on a conflict: the controller
// writes its status all the time.
func (c *Cluster) updateApplication(ctx context.Context, name string, change func(*unstructured.Unstructured) error) error {
	return c.updateObject(ctx, ApplicationGVR, ArgoCDNamespace, name, change)
}

// TerminateOperation stops the Application's running operation, as `argocd app terminate-op` does
// (status.operationState.phase: Terminating); running hooks are deleted. No-op without one.
func (c *Cluster) TerminateOperation(ctx context.Context, name string) error {
	return c.updateApplication(ctx, name, func(app *unstructured.Unstructured) error {
		if _, running, _ := unstructured.NestedFieldNoCopy(app.Object, "operation"); !running {
			return nil
		}
		return unstructured.SetNestedField(app.Object, "Terminating", "status", "operationState", "phase")
	})
}

// RefreshApplication asks the controller to compare the Application with the cluster now, as
// `argocd app get --refresh` does (the annotation argocd.argoproj.io/refresh: normal).
func (c *Cluster) RefreshApplication(ctx context.Context, name string) error {
	return c.PatchApplication(ctx, name, map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{"argocd.argoproj.io/refresh": "normal"}}})
}

// SyncApplication asks the controller to sync now, as `argocd app sync` would: it sets the
// Application's `operation` field, which the controller executes and then clears, recording the
// outcome in status.operationState. prune deletes resources the chart no longer renders; syncOptions
// (nil: the Application's spec.syncPolicy.syncOptions) apply to this sync only.
func (c *Cluster) SyncApplication(ctx context.Context, name string, prune bool, syncOptions []string) error {
	app, err := c.Application(ctx, name)
	if err != nil {
		return err
	}
	if op, found, _ := unstructured.NestedMap(app.Object, "operation"); found && op != nil {
		return fmt.Errorf("application %s already has an operation in progress: %v", name, op)
	}
	if syncOptions == nil {
		syncOptions, _, _ = unstructured.NestedStringSlice(app.Object, "spec", "syncPolicy", "syncOptions")
	}
	sync := map[string]any{"prune": prune}
	if len(syncOptions) > 0 {
		sync["syncOptions"] = syncOptions
	}
	return c.PatchApplication(ctx, name, map[string]any{"operation": map[string]any{
		"initiatedBy": map[string]any{"username": "e2e"},
		"sync":        sync,
	}})
}

// AppStatus is what an Application's status says, flattened.
type AppStatus struct {
	Sync     string // status.sync.status: Synced, OutOfSync, Unknown
	Revision string // status.sync.revision: for a Helm source, the chart version compared
	Health   string // status.health.status: Healthy, Progressing, Degraded, Missing, ...
	// Current is true when the status describes the spec as it is now (the controller compared
	// exactly spec.source: status.sync.comparedTo.source), not an older spec.
	Current bool
	// OperationPhase and OperationMessage describe the last (or running) operation:
	// status.operationState.phase (Running, Succeeded, Failed, Error, Terminating) and .message.
	OperationPhase   string
	OperationMessage string
	// OperationPending is true while the Application's `operation` field is set (not finished yet).
	OperationPending bool
	// Deployed is true when the last (or running) sync operation applies exactly the current spec
	// (status.operationState.syncResult.source is spec.source): with Phase Succeeded, the spec as it
	// is now was synced.
	Deployed bool
	// OperationStarted and OperationFinished are the last operation's startedAt and finishedAt (zero
	// while it runs).
	OperationStarted, OperationFinished time.Time
	// SyncResults are status.operationState.syncResult.resources: what the last (or running) sync did
	// to each resource and hook ("created", "pruned", a hook's phase).
	SyncResults []SyncResult
	Resources   []AppResource // status.resources: what the Application manages
	Conditions  []string      // status.conditions, as "<type>: <message>"
}

// SyncResult is one entry of status.operationState.syncResult.resources.
type SyncResult struct {
	Kind, Namespace, Name string
	Status                string // Synced, SyncFailed, Pruned, PruneSkipped
	HookType              string // Sync, PreSync, ...; empty for a resource
	HookPhase             string // Running, Succeeded, Failed, ... (also set for resources)
	SyncPhase             string // PreSync, Sync, PostSync
	Message               string
}

func (r SyncResult) String() string {
	hook := ""
	if r.HookType != "" {
		hook = " hook " + r.HookType
	}
	return fmt.Sprintf("%s/%s%s: %s %s %q", r.Kind, r.Name, hook, r.Status, r.HookPhase, r.Message)
}

// AppResource is one entry of status.resources.
type AppResource struct {
	Group, Version, Kind, Namespace, Name string
	Status                                string // Synced, OutOfSync
	Health                                string // empty for kinds without a health check
	Hook                                  bool   // a hook (e.g. the last Sync hook Job), not a managed resource
	RequiresPruning                       bool   // live, app-managed, no longer rendered: a sync with prune deletes it
}

func (r AppResource) String() string {
	s := fmt.Sprintf("%s/%s %s (%s, %s)", r.Kind, r.Name, r.Namespace, r.Status, r.Health)
	if r.Hook {
		s += " hook"
	}
	if r.RequiresPruning {
		s += " requiresPruning"
	}
	return s
}

func (s AppStatus) String() string {
	res := make([]string, len(s.Resources))
	for i, r := range s.Resources {
		res[i] = r.String()
	}
	return fmt.Sprintf("sync=%s revision=%s health=%s current=%t operation=%s pending=%t %q resources=[%s] conditions=%q",
		s.Sync, s.Revision, s.Health, s.Current, s.OperationPhase, s.OperationPending, s.OperationMessage,
		strings.Join(res, ", "), s.Conditions)
}

// ApplicationStatus reads an Application's status.
func (c *Cluster) ApplicationStatus(ctx context.Context, name string) (AppStatus, error) {
	app, err := c.Application(ctx, name)
	if err != nil {
		return AppStatus{}, err
	}
	return StatusOf(app), nil
}

// StatusOf flattens an Application object's status.
func StatusOf(app *unstructured.Unstructured) AppStatus {
	o := app.Object
	str := func(path ...string) string { s, _, _ := unstructured.NestedString(o, path...); return s }
	s := AppStatus{
		Sync:             str("status", "sync", "status"),
		Revision:         str("status", "sync", "revision"),
		Health:           str("status", "health", "status"),
		OperationPhase:   str("status", "operationState", "phase"),
		OperationMessage: str("status", "operationState", "message"),
	}
	_, s.OperationPending, _ = unstructured.NestedFieldNoCopy(o, "operation")
	s.OperationStarted, _ = time.Parse(time.RFC3339, str("status", "operationState", "startedAt"))
	s.OperationFinished, _ = time.Parse(time.RFC3339, str("status", "operationState", "finishedAt"))
	results, _, _ := unstructured.NestedSlice(o, "status", "operationState", "syncResult", "resources")
	for _, r := range results {
		m, _ := r.(map[string]any)
		get := func(k string) string { v, _ := m[k].(string); return v }
		s.SyncResults = append(s.SyncResults, SyncResult{
			Kind: get("kind"), Namespace: get("namespace"), Name: get("name"), Status: get("status"),
			HookType: get("hookType"), HookPhase: get("hookPhase"), SyncPhase: get("syncPhase"), Message: get("message"),
		})
	}
	spec, _, _ := unstructured.NestedFieldNoCopy(o, "spec", "source")
	compared, found, _ := unstructured.NestedFieldNoCopy(o, "status", "sync", "comparedTo", "source")
	s.Current = found && reflect.DeepEqual(spec, compared)
	synced, found, _ := unstructured.NestedFieldNoCopy(o, "status", "operationState", "syncResult", "source")
	s.Deployed = found && reflect.DeepEqual(spec, synced)
	resources, _, _ := unstructured.NestedSlice(o, "status", "resources")
	for _, r := range resources {
		m, _ := r.(map[string]any)
		get := func(path ...string) string { v, _, _ := unstructured.NestedString(m, path...); return v }
		hook, _, _ := unstructured.NestedBool(m, "hook")
		prune, _, _ := unstructured.NestedBool(m, "requiresPruning")
		s.Resources = append(s.Resources, AppResource{
			Group: get("group"), Version: get("version"), Kind: get("kind"), Namespace: get("namespace"),
			Name: get("name"), Status: get("status"), Health: get("health", "status"), Hook: hook, RequiresPruning: prune,
		})
	}
	conditions, _, _ := unstructured.NestedSlice(o, "status", "conditions")
	for _, cond := range conditions {
		m, _ := cond.(map[string]any)
		s.Conditions = append(s.Conditions, fmt.Sprintf("%v: %v", m["type"], m["message"]))
	}
	return s
}

// WaitApplication polls the Application until cond holds for its status.
func (c *Cluster) WaitApplication(ctx context.Context, timeout time.Duration, name, what string, cond func(AppStatus) bool) (AppStatus, error) {
	var last AppStatus
	err := Eventually(ctx, timeout, "Application "+name+" "+what, func(ctx context.Context) (bool, string, error) {
		s, err := c.ApplicationStatus(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		last = s
		return cond(s), s.String(), nil
	})
	return last, err
}

// ErrSyncFailed is returned by WaitSynced when the last sync operation failed.
var ErrSyncFailed = errors.New("sync failed")

// WaitSynced waits until the Application is Synced and Healthy for its current spec with no
// operation pending. It fails early if the last sync operation failed.
func (c *Cluster) WaitSynced(ctx context.Context, timeout time.Duration, name string) (AppStatus, error) {
	var failed AppStatus
	s, err := c.WaitApplication(ctx, timeout, name, "to be Synced and Healthy", func(s AppStatus) bool {
		if !s.OperationPending && (s.OperationPhase == "Failed" || s.OperationPhase == "Error") {
			failed = s
			return true
		}
		return s.Current && !s.OperationPending && s.Sync == "Synced" && s.Health == "Healthy"
	})
	if err != nil {
		return s, err
	}
	if failed.OperationPhase != "" {
		return failed, fmt.Errorf("Application %s: %w: %s", name, ErrSyncFailed, failed)
	}
	return s, nil
}

// DeleteApplication deletes the Application and waits until it is gone (with Cascade, Argo CD first
// deletes what it deployed). A running operation is terminated first: Argo CD deletes an
// Application only when no operation runs (a sync waiting for a paused Rollout would never end).
func (c *Cluster) DeleteApplication(ctx context.Context, timeout time.Duration, name string) error {
	apps := c.Dynamic.Resource(ApplicationGVR).Namespace(ArgoCDNamespace)
	if err := c.TerminateOperation(ctx, name); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := apps.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return Eventually(ctx, timeout, "Application "+name+" to be deleted", func(ctx context.Context) (bool, string, error) {
		app, err := apps.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err == nil {
			if _, running, _ := unstructured.NestedFieldNoCopy(app.Object, "operation"); running {
				if phase, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "phase"); phase == "Running" {
					return false, "an operation runs", c.TerminateOperation(ctx, name)
				}
			}
		}
		return false, "still there", err
	})
}
