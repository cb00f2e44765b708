//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Every metric the chart's alert rules and the Grafana dashboard query, with every label they select or
// group by, is exported by the real controller (pinning on) or, for the webhook's failed calls, by the
// real kube-apiserver. The metric names come from the rendered PrometheusRule's expressions and the
// dashboard's queries, not from a list here.
func TestEveryMetricTheAlertsAndDashboardUseIsExported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	used := usedMetrics(t)
	t.Logf("given: the rules and the dashboard query %d metrics: %s", len(used), strings.Join(sortedKeys(used), ", "))

	ns := givenNamespace(t, "e2e-metrics")
	// The chart installs the PinTable CRD, and where it is served the controller keeps PinTables in
	// webhook mode too (ready to switch) and exports their gauges. Without this the story depended on
	// a policy story having installed it first on the shared cluster.
	must(t, e2e.cluster.EnsurePinTableCRD(ctx, e2e.root))
	ctl := startPinningController(t, "Fail", ns)
	addr := metricsAddress(t, ctl)
	cm, err := e2e.cluster.CreateConfigRevision(ctx, ns, "demo-cm", map[string]string{"k": "v"}, true)
	must(t, err)
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, cm.Name))
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PinnedTemplate("web", []string{"app-config"}, pinV1), nil)
	must(t, err)
	rs := deploymentReplicaSet(t, ns, web)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, 1))
	t.Logf("given: the controller with -pinning protects %s and pinned a pod of %s", cm.Name, rs.Name)

	ours := scrape(t, "http://"+addr+"/metrics")
	t.Logf("when: /metrics of the controller is scraped: %d families", len(ours))

	t.Log("when: the webhook is down under Fail, then under Ignore, and a pod is created each time")
	must(t, ctl.Stop())
	cfg := "pin-" + ns
	failed, err := e2e.cluster.CreateDeployment(ctx, ns, "refused", framework.PinnedTemplate("refused", []string{"app-config"}, pinV1), nil)
	must(t, err)
	waitEvent(t, ns, deploymentReplicaSet(t, ns, failed).Name, "FailedCreate")
	patch := `[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]`
	_, err = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, cfg, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
	open, err := e2e.cluster.CreateDeployment(ctx, ns, "unpinned", framework.PinnedTemplate("unpinned", []string{"app-config"}, pinV1), nil)
	must(t, err)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, deploymentReplicaSet(t, ns, open), 1))
	raw, err := e2e.cluster.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	must(t, err)
	apiserver := parseMetrics(t, string(raw))

	var missing []string
	for name, labels := range used {
		families := ours
		if strings.HasPrefix(name, "apiserver_") {
			families = apiserver
		}
		if err := exported(families, name, labels); err != nil {
			missing = append(missing, err.Error())
			continue
		}
		t.Logf("then: %s exported with %v", name, sortedKeys(labels))
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("the rules or the dashboard use series nothing exports:\n%s", strings.Join(missing, "\n"))
	}
}

// usedMetrics returns every metric the chart's PrometheusRule (pinning on) and the dashboard query,
// with the labels they select on or group by (those a scrape adds, such as namespace, job and pod, left
// out). A histogram's _bucket, _count and _sum are its own name.
func usedMetrics(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out, err := helmCLI(t).Run(context.Background(), "template", "configmap-attacher", chartPath("configmap-attacher"), "-n", "kube-system",
		"--set", "metrics.prometheusRule.enabled=true", "--set", "pinning.enabled=true", "--show-only", "templates/prometheusrule.yaml")
	must(t, err)
	objs, err := framework.ParseManifests(out)
	must(t, err)
	var exprs []string
	for _, o := range objs {
		groups, _ := o.Object["spec"].(map[string]any)["groups"].([]any)
		for _, g := range groups {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				exprs = append(exprs, fmt.Sprint(r.(map[string]any)["expr"]))
			}
		}
	}
	if len(exprs) == 0 {
		t.Fatal("the rendered PrometheusRule has no rule")
	}
	b, err := os.ReadFile(filepath.Join(e2e.root, "charts/configmap-attacher/files/dashboard.json"))
	must(t, err)
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct{ Definition string } `json:"list"`
		} `json:"templating"`
	}
	must(t, json.Unmarshal(b, &dash))
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	used := map[string]map[string]bool{}
	for _, e := range exprs {
		for name, labels := range metricsIn(e) {
			if used[name] == nil {
				used[name] = map[string]bool{}
			}
			for l := range labels {
				used[name][l] = true
			}
		}
	}
	return used
}

var (
	selectorRE = regexp.MustCompile(`\b((?:configmap_attacher|apiserver|process|go)_[a-zA-Z0-9_]+)\s*(\{[^}]*\})?`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupingRE = regexp.MustCompile(`\b(?:by|on|ignoring)\s*\(([^)]*)\)`)
	// Labels the scrape adds (target labels), or the histogram's own.
	scrapeLabels = map[string]bool{"namespace": true, "job": true, "pod": true, "instance": true, "service": true, "endpoint": true, "container": true, "le": true}
)

// metricsIn returns the metrics a PromQL expression (or a Grafana label_values query) reads, each with
// the labels the expression selects on, groups by, or joins on. A grouping's labels are credited to
// every metric of the expression: each must carry them.
func metricsIn(expr string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	var grouping []string
	for _, m := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouping = append(grouping, l)
			}
		}
	}
	if m := regexp.MustCompile(`label_values\([^,]+,\s*([a-zA-Z_]+)\)`).FindStringSubmatch(expr); m != nil {
		grouping = append(grouping, m[1])
	}
	for _, m := range selectorRE.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		labels := out[name]
		if labels == nil {
			labels = map[string]bool{}
			out[name] = labels
		}
		for _, l := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = true
		}
		for _, l := range grouping {
			labels[l] = true
		}
	}
	for _, labels := range out {
		for l := range labels {
			if scrapeLabels[l] {
				delete(labels, l)
			}
		}
	}
	return out
}

// exported checks that families hold name with at least one series carrying every label; a name with
// _bucket, _count or _sum is a series of the histogram (or summary) it is the suffix of, unless a family
// has that very name (the API server's rejection_count is a counter).
func exported(families map[string]*dto.MetricFamily, name string, labels map[string]bool) error {
	f, ok := families[name]
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, cut := strings.CutSuffix(name, suffix); !ok && cut {
			if h := families[base]; h != nil && (h.GetType() == dto.MetricType_HISTOGRAM || h.GetType() == dto.MetricType_SUMMARY) {
				f, ok = h, true
			}
		}
	}
	if !ok {
		return fmt.Errorf("%s: not exported", name)
	}
	for _, m := range f.GetMetric() {
		have := map[string]bool{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = true
		}
		all := true
		for l := range labels {
			all = all && have[l]
		}
		if all {
			return nil
		}
	}
	return fmt.Errorf("%s: no series with the labels %v", name, sortedKeys(labels))
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(t, string(b))
}

func parseMetrics(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	must(t, err)
	return families
}

// metricsAddress is where a controller process serves /metrics, from its "serving" log line.
func metricsAddress(t *testing.T, p *framework.Process) string {
	t.Helper()
	var addr string
	must(t, framework.Eventually(context.Background(), 30*time.Second, "the metrics address in the log", func(context.Context) (bool, string, error) {
		addr = p.ServingAddress("metrics")
		return addr != "", "not logged yet", nil
	}))
	return addr
}

// waitEvent waits for an Event of this reason on the named object.
func waitEvent(t *testing.T, ns, name, reason string) {
	t.Helper()
	must(t, framework.Eventually(context.Background(), 60*time.Second, "a "+reason+" event on "+name, func(ctx context.Context) (bool, string, error) {
		evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return e.InvolvedObject.Name == name && e.Reason == reason }), "none", nil
	}))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
