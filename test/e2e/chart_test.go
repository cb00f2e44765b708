//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The controller chart (charts/configmap-attacher): installed with the real helm, then its RBAC is
// proved by running the real binary locally as the chart's own ServiceAccounts (a TokenRequest token),
// with the arguments of the chart's Deployment. kwok runs no container, so the chart's pod never does
// the work itself.

func TestChartsLint(t *testing.T) {
	t.Parallel()
	h := helmCLI(t)
	for _, tc := range []struct {
		chart string
		sets  []string
	}{
		{"configmap-attacher", nil},
		{"configmap-attacher", []string{"watchNamespaces={a,b}", "jobRBAC.enabled=true", "replicas=2", "podDisruptionBudget.enabled=true", "metrics.service.enabled=true"}},
		{"configmap-attacher", []string{"controller.enabled=false", "jobRBAC.enabled=true", "rbac.ownerReferencesPermissionEnforcement=true"}},
		{"configmap-attacher", []string{"metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true", "metrics.dashboard.enabled=true", "pinning.enabled=true"}},
		{"base-app", nil},
		{"base-app", []string{"configmaps.cm.kv_data.k=v", "attacher=job"}},
		{"base-app", []string{"configmaps.cm.kv_data.k=v", "attacher=controller", "strategy=manual-canary-20-pct"}},
	} {
		args := []string{"lint", "--strict", chartPath(tc.chart)}
		for _, s := range tc.sets {
			args = append(args, "--set", s)
		}
		out := helmRun(t, h, args...)
		if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm %s:\n%s", strings.Join(args, " "), out)
		}
	}
	// The schema refuses what the templates could not use.
	for _, set := range []string{"replicas=-1", "logLevel=verbose", "watchNamespaces={Bad_NS}", "unknownValue=1", "leaderElection.leaseDuration=15",
		"metrics.prometheusRule.deletionHeldSeconds=10", "metrics.serviceMonitor.interval=30"} {
		if out, err := h.Run(context.Background(), "lint", chartPath("configmap-attacher"), "--set", set); err == nil {
			t.Errorf("helm lint --set %s: want a schema error, got:\n%s", set, out)
		}
	}
	if _, err := h.Run(context.Background(), "template", chartPath("configmap-attacher"), "--set", "replicas=2", "--set", "leaderElection.enabled=false"); err == nil ||
		!strings.Contains(err.Error(), "leaderElection") {
		t.Errorf("replicas 2 without leader election: want a refusal naming leaderElection, got %v", err)
	}
}

// Observability is off by default and one value turns on each piece: the ServiceMonitor (with the
// metrics Service it scrapes), the PrometheusRule, the dashboard ConfigMap with the Grafana sidecar's
// label.
func TestChartObservabilityIsOffByDefaultOneValueEach(t *testing.T) {
	t.Parallel()
	h := helmCLI(t)
	kinds := func(sets ...string) map[string]*unstructured.Unstructured {
		args := []string{"template", "cma", chartPath("configmap-attacher"), "-n", "kube-system"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		objs, err := framework.ParseManifests(helmRun(t, h, args...))
		must(t, err)
		out := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			out[o.GetKind()+"/"+o.GetName()] = o
		}
		return out
	}
	none := kinds()
	for _, k := range []string{"ServiceMonitor/cma-configmap-attacher", "PrometheusRule/cma-configmap-attacher", "ConfigMap/cma-configmap-attacher-dashboard", "Service/cma-configmap-attacher-metrics"} {
		if none[k] != nil {
			t.Errorf("%s rendered by default", k)
		}
	}
	for set, want := range map[string][]string{
		"metrics.serviceMonitor.enabled=true": {"ServiceMonitor/cma-configmap-attacher", "Service/cma-configmap-attacher-metrics"},
		"metrics.prometheusRule.enabled=true": {"PrometheusRule/cma-configmap-attacher"},
		"metrics.dashboard.enabled=true":      {"ConfigMap/cma-configmap-attacher-dashboard"},
	} {
		got := kinds(set)
		for _, k := range want {
			if got[k] == nil {
				t.Errorf("--set %s: no %s", set, k)
			}
		}
		if len(got) != len(none)+len(want) {
			t.Errorf("--set %s rendered %d objects; want the %d of the default and %v", set, len(got), len(none), want)
		}
	}
	dash := kinds("metrics.dashboard.enabled=true")["ConfigMap/cma-configmap-attacher-dashboard"]
	if dash.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap's labels %v lack grafana_dashboard: \"1\"", dash.GetLabels())
	}
	data, _, _ := unstructured.NestedString(dash.Object, "data", "configmap-attacher.json")
	var parsed map[string]any
	if err := json.Unmarshal([]byte(data), &parsed); err != nil || parsed["uid"] != "configmap-attacher" {
		t.Errorf("the dashboard ConfigMap holds no dashboard JSON: %v", err)
	}
	sm := kinds("metrics.serviceMonitor.enabled=true")
	svcLabels := sm["Service/cma-configmap-attacher-metrics"].GetLabels()
	sel, _, _ := unstructured.NestedStringMap(sm["ServiceMonitor/cma-configmap-attacher"].Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svcLabels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service lacks (%v)", k, v, svcLabels)
		}
	}
	t.Log("then: none by default; each value renders its object alone; the dashboard carries grafana_dashboard: \"1\"; the ServiceMonitor selects the metrics Service")
}

// chartRelease is one install of charts/configmap-attacher.
type chartRelease struct {
	t        *testing.T
	name, ns string
	helm     framework.Helm
}

// installChart installs the chart into ns (helm --wait: the API server accepted every object and the
// Deployment became available) and uninstalls it at the end, cluster-scoped objects included.
func installChart(t *testing.T, name, ns string, sets ...string) *chartRelease {
	t.Helper()
	r := &chartRelease{t: t, name: name, ns: ns, helm: helmCLI(t)}
	r.upgrade(sets...)
	t.Cleanup(func() {
		// No hooks: kwok would only pretend to run the release hook (TestChartUninstallLeavesNoFinalizer
		// runs it for real); the test namespaces are released before they are deleted.
		if _, err := r.helm.Run(context.Background(), "uninstall", name, "-n", ns, "--wait", "--no-hooks", "--ignore-not-found"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return r
}

// upgrade runs helm upgrade --install with these --set values (and no others).
func (r *chartRelease) upgrade(sets ...string) {
	r.t.Helper()
	args := []string{"upgrade", "--install", r.name, chartPath("configmap-attacher"), "-n", r.ns, "--wait", "--timeout", "2m"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	helmRun(r.t, r.helm, args...)
}

func (r *chartRelease) fullname() string { return r.name + "-configmap-attacher" }

// deployment returns the chart's Deployment and checks the pod hardening it promises.
func (r *chartRelease) deployment() *appsv1.Deployment {
	t := r.t
	t.Helper()
	d, err := e2e.cluster.Kube.AppsV1().Deployments(r.ns).Get(context.Background(), r.fullname(), metav1.GetOptions{})
	must(t, err)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	sc, psc := c.SecurityContext, pod.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Error("pod: want runAsNonRoot")
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("pod: want seccompProfile RuntimeDefault")
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("container: want readOnlyRootFilesystem")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("container: want allowPrivilegeEscalation false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Error("container: want capabilities drop ALL")
	case c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz":
		t.Error("container: want liveness /healthz")
	case c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz":
		t.Error("container: want readiness /readyz")
	case c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero():
		t.Error("container: want memory request and limit")
	}
	var podNS bool
	for _, e := range c.Env {
		podNS = podNS || e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}
	if !podNS {
		t.Error("container: want POD_NAMESPACE from the downward API")
	}
	return d
}

// runController runs the binary locally as the chart's ServiceAccount, with the chart's Deployment's
// arguments (listen addresses moved to free loopback ports) and POD_NAMESPACE as the downward API
// would set it.
func (r *chartRelease) runController(d *appsv1.Deployment, extraArgs ...string) *framework.Process {
	t := r.t
	t.Helper()
	ctx := context.Background()
	pod := d.Spec.Template.Spec
	kubeconfig := serviceAccountKubeconfig(t, r.ns, pod.ServiceAccountName)
	var args []string
	for _, a := range pod.Containers[0].Args {
		// A -webhook-url among extraArgs replaces the Service the chart's pods are reached through.
		if slices.ContainsFunc(extraArgs, func(e string) bool { return strings.HasPrefix(e, "-webhook-url=") }) &&
			(strings.HasPrefix(a, "-webhook-service=") || strings.HasPrefix(a, "-webhook-bind-address=")) {
			continue
		}
		switch {
		case strings.HasPrefix(a, "-metrics-bind-address="):
			a = "-metrics-bind-address=127.0.0.1:0"
		case strings.HasPrefix(a, "-health-probe-bind-address="):
			a = "-health-probe-bind-address=127.0.0.1:0"
		}
		args = append(args, a)
	}
	args = append(args, extraArgs...)
	if !slices.Contains(args, "-leader-elect=true") || !slices.Contains(args, "-leader-election-namespace="+r.ns) {
		t.Fatalf("the chart's controller args %q: want leader election with the Lease in the release namespace %s", args, r.ns)
	}
	p, err := framework.Binary{Path: e2e.bin.Path, Kubeconfig: kubeconfig}.Start(ctx, []string{"POD_NAMESPACE=" + r.ns}, args...)
	must(t, err)
	t.Logf("running the chart's controller as ServiceAccount %s/%s: configmap-attacher %s", r.ns, pod.ServiceAccountName, strings.Join(args, " "))
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("controller logs:\n%s", p.Logs())
		}
	})
	return p
}

// runPinningController runs the chart's controller (pinning.enabled) as its ServiceAccount
// (runController), its webhook served at a free loopback URL, and waits until it leads and is Ready.
func (r *chartRelease) runPinningController(d *appsv1.Deployment) *framework.Process {
	t := r.t
	t.Helper()
	ctx := context.Background()
	port, err := framework.FreeLoopbackPort()
	must(t, err)
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	// Only here is the chart's webhook served at a URL: an administrator repoints it (clientConfig
	// holds a url or a service, and the controller's apply cannot take the chart's service away).
	patch := fmt.Sprintf(`[{"op":"remove","path":"/webhooks/0/clientConfig/service"},{"op":"add","path":"/webhooks/0/clientConfig/url","value":%q}]`, url+"/pin-pods")
	_, err = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, r.fullname(), types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
	p := r.runController(d, "-webhook-url="+url)
	r.expectLeader(p)
	// A pod created before then meets a webhook not listening yet, or one whose caBundle kube-apiserver
	// has not loaded yet: refused under failurePolicy Fail, as it would be in a cluster before the
	// Service has a Ready endpoint.
	must(t, p.WaitReady(ctx, 30*time.Second))
	return p
}

// expectLeader waits for the controller to hold the chart's Lease (its Role in the release namespace).
func (r *chartRelease) expectLeader(p *framework.Process) {
	r.t.Helper()
	must(r.t, framework.Eventually(context.Background(), 30*time.Second, "the Lease "+r.fullname()+" to be held", func(ctx context.Context) (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("the controller exited:\n%s", p.Logs())
		}
		l, err := e2e.cluster.Kube.CoordinationV1().Leases(r.ns).Get(ctx, r.fullname(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "no Lease", nil
		}
		if err != nil {
			return false, "", err
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder", nil
	}))
	r.t.Logf("then: it holds the Lease %s/%s", r.ns, r.fullname())
}

// runJob runs the Job mode as the chart's jobRBAC ServiceAccount, with the original Job's arguments.
func (r *chartRelease) runJob(rollout, ns, cm string) framework.Result {
	t := r.t
	t.Helper()
	sa := r.fullname() + "-job"
	kubeconfig := serviceAccountKubeconfig(t, r.ns, sa)
	res := framework.Binary{Path: e2e.bin.Path, Kubeconfig: kubeconfig}.Run(context.Background(), nil,
		"-rollout", rollout, "-namespace", ns, "-configmaps", cm)
	t.Logf("ran the Job as ServiceAccount %s/%s: exit %d in %s", r.ns, sa, res.Code, res.Duration.Round(time.Millisecond))
	return res
}

func mustSucceed(t *testing.T, res framework.Result) {
	t.Helper()
	if res.Code != 0 {
		t.Fatalf("the Job failed: %s", res)
	}
}

// serviceAccountKubeconfig authenticates as a ServiceAccount the chart created.
func serviceAccountKubeconfig(t *testing.T, ns, sa string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := e2e.cluster.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's ServiceAccount: %v", err)
	}
	kubeconfig, err := e2e.cluster.ServiceAccountKubeconfig(ctx, ns, sa, t.TempDir())
	must(t, err)
	return kubeconfig
}

// givenConfiguredRollout creates a config revision (opted in for the controller, or not: the Job attaches
// what it is told) and a Rollout mounting it, with extra pod labels, and returns the revision and the
// Rollout's first ReplicaSet.
func givenConfiguredRollout(t *testing.T, ns, name string, optedIn bool, podLabels map[string]string) (string, *appsv1.ReplicaSet) {
	t.Helper()
	ctx := context.Background()
	cm, err := e2e.cluster.CreateConfigRevision(ctx, ns, name+"-cm", map[string]string{"config": name}, optedIn)
	must(t, err)
	tmpl := framework.PodTemplate(name, []string{cm.Name}, nil)
	for k, v := range podLabels {
		tmpl.Labels[k] = v
	}
	must(t, e2e.cluster.CreateRollout(ctx, ns, name, framework.RolloutSpec{Replicas: 1, Template: &tmpl}))
	s := &helmStory{t: t, ns: ns, rollout: name}
	return cm.Name, s.waitNewRevision(nil, 1).rs
}

// Cluster-wide install (ClusterRole and ClusterRoleBinding, Lease Role), with every optional object.
func TestChartClusterWideRBACSuffices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-chart-cluster")
	appNS := givenNamespace(t, "e2e-chart-cluster-app")
	// Cluster-wide, the controller would also attach config in other tests' namespaces (some of which
	// are negative controls): a ReplicaSet selector keeps it to ours, RBAC stays cluster-wide.
	const selector = "e2e.configmap-attacher.io/chart"
	r := installChart(t, "cma-cluster", ns,
		"replicaSetSelector="+selector+"=cluster-wide", "jobRBAC.enabled=true", "replicas=2",
		"podDisruptionBudget.enabled=true", "metrics.service.enabled=true", "rbac.ownerReferencesPermissionEnforcement=true")
	t.Log("given: the chart installed cluster-wide (ClusterRole), 2 replicas, PDB, metrics Service, jobRBAC, ownerReference enforcement grants")
	for _, get := range []func() error{
		func() error {
			_, err := e2e.cluster.Kube.RbacV1().ClusterRoles().Get(ctx, r.fullname(), metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e2e.cluster.Kube.RbacV1().ClusterRoles().Get(ctx, r.fullname()+"-job", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e2e.cluster.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, r.fullname(), metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e2e.cluster.Kube.CoreV1().Services(ns).Get(ctx, r.fullname()+"-metrics", metav1.GetOptions{})
			return err
		},
	} {
		must(t, get())
	}
	d := r.deployment()

	t.Log("then: its ServiceAccount may read everything that uses config, and namespaces, in every namespace")
	kc := serviceAccountClient(t, ns, d.Spec.Template.Spec.ServiceAccountName)
	for what, list := range map[string]func() error{
		"pods": func() error { _, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1}); return err },
		"replicasets": func() error {
			_, err := kc.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
		"controllerrevisions": func() error {
			_, err := kc.AppsV1().ControllerRevisions("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
		"statefulsets": func() error {
			_, err := kc.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
		"daemonsets": func() error { _, err := kc.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{Limit: 1}); return err },
		"jobs":       func() error { _, err := kc.BatchV1().Jobs("").List(ctx, metav1.ListOptions{Limit: 1}); return err },
		"cronjobs":   func() error { _, err := kc.BatchV1().CronJobs("").List(ctx, metav1.ListOptions{Limit: 1}); return err },
		"secrets":    func() error { _, err := kc.CoreV1().Secrets("").List(ctx, metav1.ListOptions{Limit: 1}); return err },
		"namespaces": func() error { _, err := kc.CoreV1().Namespaces().Get(ctx, appNS, metav1.GetOptions{}); return err },
	} {
		if err := list(); err != nil {
			t.Errorf("%s as the controller: %v", what, err)
		}
	}

	// Run cluster-wide, in-use protection would hold config in every other test's namespace (some are
	// negative controls that must see config deleted): the process is narrowed to the app namespace;
	// the reads above prove the ClusterRole covers every namespace.
	t.Log("when: the controller runs as the chart's ServiceAccount with the chart's arguments (and -namespaces=" + appNS + ")")
	p := r.runController(d, "-namespaces="+appNS)
	r.expectLeader(p)
	cm, rs := givenConfiguredRollout(t, appNS, "demo", true, map[string]string{selector: "cluster-wide"})
	must(t, e2e.cluster.WaitAttached(ctx, 30*time.Second, appNS, refs.ConfigMap, cm, rs))
	t.Logf("then: %s/%s is attached to ReplicaSet %s", appNS, cm, rs.Name)

	t.Log("when: the Job mode runs as the jobRBAC ServiceAccount")
	jobCM, jobRS := givenConfiguredRollout(t, appNS, "job-demo", false, nil) // not opted in: the controller leaves it
	mustSucceed(t, r.runJob("job-demo", appNS, jobCM))
	must(t, framework.CheckAttached(configOwners(t, appNS, jobCM), jobRS))
	t.Logf("then: %s/%s is attached to ReplicaSet %s", appNS, jobCM, jobRS.Name)
}

// watchNamespaces: Roles in the watched namespaces only, the controller's -namespaces flag.
func TestChartNamespacedRBACSuffices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-chart-ns")
	appNS := givenNamespace(t, "e2e-chart-ns-app")
	sets := []string{"watchNamespaces={" + appNS + "}", "jobRBAC.enabled=true"}
	r := installChart(t, "cma-ns", ns, sets...)
	t.Logf("given: the chart installed with watchNamespaces=[%s]", appNS)

	// The local cluster runs OwnerReferencesPermissionEnforcement (hack/cluster/kwokctl.yaml), as
	// OpenShift does: there, setting an ownerReference needs delete on the object, which the chart
	// grants only when asked.
	enforced, err := e2e.cluster.EnforcesOwnerReferencePermissions(ctx, appNS, t.TempDir())
	must(t, err)
	jobCM, jobRS := givenConfiguredRollout(t, appNS, "job-demo", false, nil) // not opted in: the controller leaves it
	if enforced {
		t.Log("given: the API server enforces OwnerReferencesPermissionEnforcement")
		t.Log("when: the Job runs with the chart's default RBAC")
		res := r.runJob("job-demo", appNS, jobCM)
		if res.Code != 1 || !strings.Contains(res.Stderr, "OwnerReferencesPermissionEnforcement") {
			t.Fatalf("want exit 1 naming OwnerReferencesPermissionEnforcement, got %s", res)
		}
		if owners := configOwners(t, appNS, jobCM); len(owners) != 0 {
			t.Fatalf("a refused Job wrote ownerReferences: %v", owners)
		}
		t.Log("then: it is refused with an error naming the admission plugin, and writes nothing")
		sets = append(sets, "rbac.ownerReferencesPermissionEnforcement=true")
		t.Log("when: the chart is upgraded with rbac.ownerReferencesPermissionEnforcement=true")
		r.upgrade(sets...)
	} else {
		t.Log("given: the API server does not enforce OwnerReferencesPermissionEnforcement: the default RBAC suffices")
	}
	for _, name := range []string{r.fullname(), r.fullname() + "-job"} {
		if _, err := e2e.cluster.Kube.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("ClusterRole %s: want none with watchNamespaces, got err=%v", name, err)
		}
		if _, err := e2e.cluster.Kube.RbacV1().Roles(appNS).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("Role %s/%s: %v", appNS, name, err)
		}
	}
	d := r.deployment()
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "-namespaces="+appNS) {
		t.Fatalf("controller args %q: want -namespaces=%s", d.Spec.Template.Spec.Containers[0].Args, appNS)
	}

	t.Log("when: the controller runs as the chart's ServiceAccount with the chart's arguments")
	p := r.runController(d)
	r.expectLeader(p)
	cm, rs := givenConfiguredRollout(t, appNS, "demo", true, nil)
	must(t, e2e.cluster.WaitAttached(ctx, 30*time.Second, appNS, refs.ConfigMap, cm, rs))
	t.Logf("then: %s/%s is attached to ReplicaSet %s", appNS, cm, rs.Name)

	t.Log("then: its ServiceAccount can read nothing outside the watched namespaces")
	kc := serviceAccountClient(t, ns, d.Spec.Template.Spec.ServiceAccountName)
	if _, err := kc.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing ConfigMaps in %s as the controller: want Forbidden, got %v", ns, err)
	}
	if _, err := kc.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing ReplicaSets cluster-wide as the controller: want Forbidden, got %v", err)
	}

	t.Log("when: the Job mode runs as the jobRBAC ServiceAccount")
	mustSucceed(t, r.runJob("job-demo", appNS, jobCM))
	must(t, framework.CheckAttached(configOwners(t, appNS, jobCM), jobRS))
	t.Logf("then: %s/%s is attached to ReplicaSet %s", appNS, jobCM, jobRS.Name)
}

func serviceAccountClient(t *testing.T, ns, sa string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", serviceAccountKubeconfig(t, ns, sa))
	must(t, err)
	kc, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	return kc
}

// runReleaseHook runs the chart's pre-delete hook as `helm uninstall` would, had kwok run its pod: it
// creates the hook's own ServiceAccount and RBAC (from `helm get hooks`) and runs the real binary with
// the hook Job's arguments as that ServiceAccount, stopping the local controller process p the moment
// the hook scales the controller's Deployment to zero (what the kubelet would do to its pod). It fails
// the test unless the hook exits 0.
func (r *chartRelease) runReleaseHook(p *framework.Process) framework.Result {
	t := r.t
	t.Helper()
	ctx := context.Background()
	ns := r.ns
	hooks, err := r.helm.Run(ctx, "get", "hooks", r.name, "-n", ns)
	must(t, err)
	objs, err := framework.ParseManifests(hooks)
	must(t, err)
	var hookJob *batchv1.Job
	for _, o := range objs {
		if o.GetAnnotations()["helm.sh/hook"] != "pre-delete" {
			continue
		}
		if o.GetKind() == "Job" {
			hookJob, err = framework.FindJob(hooks)
			must(t, err)
			continue
		}
		gvr := map[string]schema.GroupVersionResource{
			"ServiceAccount": {Version: "v1", Resource: "serviceaccounts"},
			"Role":           {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
			"RoleBinding":    {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
			// With pinning only: deleting the webhook's configuration, a cluster-scoped object.
			"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
			"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		}[o.GetKind()]
		if gvr.Resource == "" || (o.GetNamespace() == "" && !strings.HasSuffix(o.GetName(), "-webhook")) {
			t.Fatalf("unexpected pre-delete hook object %s %s (a namespaced install needs nothing cluster-wide but deleting the webhook)", o.GetKind(), o.GetName())
		}
		_, err := e2e.cluster.Dynamic.Resource(gvr).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{})
		must(t, err)
		if o.GetNamespace() == "" {
			t.Cleanup(func() { // Helm's hook-delete-policy would
				_ = e2e.cluster.Dynamic.Resource(gvr).Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
			})
		}
	}
	if hookJob == nil {
		t.Fatal("the chart has no pre-delete hook Job")
	}
	pod := hookJob.Spec.Template.Spec
	// The controller's pod stays until the process p, which plays it, has stopped: the hook waits for
	// the pod to be gone, as for a real one whose container the kubelet stops.
	d := r.deployment()
	ctlPods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	must(t, err)
	for _, cp := range ctlPods.Items {
		must(t, holdPod(ctx, ns, cp.Name))
	}
	t.Logf("when: the pre-delete hook runs as ServiceAccount %s: configmap-attacher %s", pod.ServiceAccountName, strings.Join(pod.Containers[0].Args, " "))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = framework.Eventually(ctx, 2*time.Minute, "the controller scaled to 0", func(ctx context.Context) (bool, string, error) {
			cur, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Get(ctx, r.fullname(), metav1.GetOptions{})
			return err == nil && cur.Spec.Replicas != nil && *cur.Spec.Replicas == 0, "still scaled up", nil
		})
		_ = p.Stop()
		for _, cp := range ctlPods.Items {
			_ = letPodGo(ctx, ns, cp.Name)
		}
	}()
	res := framework.Binary{Path: e2e.bin.Path, Kubeconfig: serviceAccountKubeconfig(t, ns, pod.ServiceAccountName)}.
		Run(ctx, nil, pod.Containers[0].Args...)
	<-stopped
	if res.Code != 0 {
		t.Fatalf("the hook: %s", res)
	}
	return res
}

// pinning.enabled: the chart's RBAC suffices for zero-touch pinning (namespaces, the webhook
// configuration, the certificate Secret, snapshots), and with reloaderAnnotations for the config
// trigger. kwok runs no container and the API server could
// not reach one here, so the controller runs locally as the chart's ServiceAccount with the chart's
// arguments, serving the webhook at a loopback URL instead of behind the chart's Service: it then
// writes its URL into the chart's own MutatingWebhookConfiguration.
func TestChartPinningRBACSuffices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-chart-pinning")
	appNS := givenNamespace(t, "e2e-chart-pinning-app")
	r := installChart(t, "cma-pin", ns, "watchNamespaces={"+appNS+"}", "pinning.enabled=true", "pinning.admission=webhook", "reloaderAnnotations=true", "rbac.ownerReferencesPermissionEnforcement=true")
	d := r.deployment()
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Affinity == nil || d.Spec.Template.Spec.Affinity.PodAntiAffinity == nil {
		t.Fatalf("pinning: want 2 replicas with anti-affinity, got %d, %+v", *d.Spec.Replicas, d.Spec.Template.Spec.Affinity)
	}
	if _, err := e2e.cluster.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, r.fullname(), metav1.GetOptions{}); err != nil {
		t.Fatalf("pinning: want a PodDisruptionBudget: %v", err)
	}
	cfg, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, r.fullname(), metav1.GetOptions{})
	must(t, err)
	t.Cleanup(func() {
		_ = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), r.fullname(), metav1.DeleteOptions{})
	})
	wh := cfg.Webhooks[0]
	if wh.ClientConfig.Service == nil || *wh.FailurePolicy != "Fail" || *wh.SideEffects != "NoneOnDryRun" || *wh.TimeoutSeconds != 10 || len(wh.MatchConditions) != 2 {
		t.Fatalf("the chart's webhook: %+v", wh)
	}
	// The chart says what the controller registers at a URL (pinning.Registration.Webhook), the URL and
	// caBundle aside: the same selectors, the same never-gated namespaces.
	want := pinning.Registration{OwnNamespace: ns, Namespaces: []string{appNS}, FailurePolicy: "Fail", TimeoutSeconds: 10}.Webhook(nil)
	if !equality.Semantic.DeepEqual(wh.NamespaceSelector, want.NamespaceSelector) || !equality.Semantic.DeepEqual(wh.ObjectSelector, want.ObjectSelector) ||
		!equality.Semantic.DeepEqual(wh.MatchConditions, want.MatchConditions) || !equality.Semantic.DeepEqual(wh.Rules, want.Rules) {
		t.Fatalf("the chart's webhook selects %+v, %+v, %+v, %+v; the controller's at a URL %+v, %+v, %+v, %+v",
			wh.NamespaceSelector, wh.ObjectSelector, wh.MatchConditions, wh.Rules, want.NamespaceSelector, want.ObjectSelector, want.MatchConditions, want.Rules)
	}
	t.Log("given: the chart installed with pinning.enabled: 2 replicas, PDB, anti-affinity, a Fail webhook behind a Service")

	must(t, e2e.cluster.EnablePinning(ctx, appNS))
	r.runPinningController(d)
	rs := givenPinnedWeb(t, appNS)
	t.Log("then: as the chart's ServiceAccount the controller made its certificate, registered the webhook and pinned the pod")

	t.Log("when: the Deployment opts in with Reloader's annotation and app-config alone is edited (reloaderAnnotations=true)")
	triggered{t: t, ns: appNS}.optIn(framework.DeploymentGVR, "Deployment", "web")
	must(t, e2e.cluster.EditConfigMap(ctx, appNS, "app-config", pinV2))
	next := triggered{t: t, ns: appNS}.waitDeployment("web", pinV2, func(n *appsv1.ReplicaSet) bool { return n.UID != rs.UID && hashOf(n) != "" })
	t.Logf("then: as the chart's ServiceAccount the controller started revision %s (the chart grants patch on workloads)", framework.RevisionOf(next))

	t.Log("when: the Deployment follows Secret db-creds too (a reload list) and db-creds is edited")
	_, err = e2e.cluster.Kube.CoreV1().Secrets(appNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-creds", Namespace: appNS},
		StringData: map[string]string{"password": "p1"}}, metav1.CreateOptions{})
	must(t, err)
	must(t, e2e.cluster.Annotate(ctx, framework.DeploymentGVR, appNS, "web", map[string]string{api.ReloaderSecretReload: "db-creds"}))
	must(t, framework.Eventually(ctx, time.Minute, "the hash key Secret", func(ctx context.Context) (bool, string, error) {
		key, err := e2e.cluster.Kube.CoreV1().Secrets(ns).Get(ctx, r.fullname()+"-config-hash-key", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not yet", nil
		}
		return err == nil && key.Labels[api.KeyLabel] == api.KeyValue, fmt.Sprint(err), err
	}))
	_, err = e2e.cluster.Kube.CoreV1().Secrets(appNS).Patch(ctx, "db-creds", types.MergePatchType, []byte(`{"stringData":{"password":"p2"}}`), metav1.PatchOptions{})
	must(t, err)
	last := triggered{t: t, ns: appNS}.waitDeployment("web", pinV2, func(n *appsv1.ReplicaSet) bool { return n.UID != rs.UID && n.UID != next.UID && hashOf(n) != "" })
	t.Logf("then: as the chart's ServiceAccount the controller made its hash key in %s and started revision %s for the Secret", ns, framework.RevisionOf(last))
}
