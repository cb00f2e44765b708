package render

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// lookupChart writes a chart whose templates cover the shapes lookup takes in public charts: a named
// template in _helpers.tpl reading the chart's own Secret back (grafana), a computed kind in a packaged
// subchart's helper (bitnami common's secrets.lookup), a direct lookup of a ConfigMap (redis' ports
// ConfigMap), and a Secret whose template looks up only ConfigMaps.
func lookupChart(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: app\nversion: 1.0.0\n",
		"templates/_helpers.tpl": `{{- define "app.password" -}}
{{- $s := lookup "v1" "Secret" .Release.Namespace "app" -}}
{{- if $s }}{{ index $s.data "password" }}{{ else }}{{ randAlphaNum 10 | b64enc }}{{ end -}}
{{- end -}}
{{- define "app.data" -}}password: {{ include "app.password" . }}{{- end -}}`,
		"templates/secret.yaml":    "apiVersion: v1\nkind: Secret\nmetadata: {name: app}\ndata:\n  {{- include \"app.data\" . | nindent 2 }}\n",
		"templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-config}\ndata: {k: v}\n",
		"templates/other.yaml":     "apiVersion: v1\nkind: Secret\nmetadata: {name: other}\ndata: {{ include \"common.get\" (dict \"kind\" \"Secret\") }}\n",
		"templates/ports.yaml": `{{- $old := lookup "v1" "ConfigMap" .Release.Namespace "ports" }}
apiVersion: v1
kind: ConfigMap
metadata: {name: ports}
data: {port: {{ if $old }}{{ $old.data.port }}{{ else }}"30000"{{ end }}}`,
		"templates/cert.yaml": "{{- $ca := lookup \"v1\" \"ConfigMap\" \"\" \"ca\" }}\napiVersion: v1\nkind: Secret\nmetadata: {name: cert}\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, []byte(text), 0o644))
	}
	// A packaged subchart, as `helm dependency build` leaves it.
	var tgz bytes.Buffer
	gz := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(gz)
	for name, text := range map[string]string{
		"common/Chart.yaml":           "apiVersion: v2\nname: common\nversion: 2.0.0\ntype: library\n",
		"common/templates/_get.tpl":   `{{- define "common.get" -}}{{ (lookup "v1" .kind "" "x").data | toJson }}{{- end -}}`,
		"common/templates/_names.tpl": `{{- define "common.name" -}}x{{- end -}}`,
	} {
		must(tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(text)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(text))
		must(err)
	}
	must(tw.Close())
	must(gz.Close())
	must(os.MkdirAll(filepath.Join(dir, "charts"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "charts", "common-2.0.0.tgz"), tgz.Bytes(), 0o644))
	return dir
}

// lookupOutput is what `helm template` writes for lookupChart (with a Deployment using it all).
const lookupOutput = `---
# Source: app/templates/secret.yaml
apiVersion: v1
kind: Secret
metadata: {name: app}
data: {password: cGFzcw==}
---
# Source: app/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {k: v}
---
# Source: app/templates/other.yaml
apiVersion: v1
kind: Secret
metadata: {name: other}
data: {k: dg==}
---
# Source: app/templates/ports.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: ports}
data: {port: "30000"}
---
# Source: app/templates/cert.yaml
apiVersion: v1
kind: Secret
metadata: {name: cert}
data: {k: dg==}
---
# Source: app/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  template:
    spec:
      containers:
        - name: app
          image: app
          envFrom:
            - secretRef: {name: app}
            - secretRef: {name: other}
            - secretRef: {name: cert}
            - configMapRef: {name: app-config}
            - configMapRef: {name: ports}
`

// helm4Form is lookupOutput as Helm 4 hands it to a post-renderer: no "# Source:" comments, each
// object annotated with its template file instead.
func helm4Form(t *testing.T, helm3 string) string {
	t.Helper()
	var out strings.Builder
	for _, doc := range strings.Split(helm3, "---\n") {
		src, rest, ok := strings.Cut(doc, "\n")
		src, isSource := strings.CutPrefix(src, "# Source: ")
		if !ok || !isSource {
			continue
		}
		name := regexp.MustCompile(`metadata: \{name: ([a-z-]+)\}`)
		if !name.MatchString(rest) {
			t.Fatalf("no metadata in %q", rest)
		}
		out.WriteString("---\n" + name.ReplaceAllString(rest, "metadata: {name: $1, annotations: {"+helmSourceAnnotation+": "+src+"}}"))
	}
	return out.String()
}

func TestLookupRefusesRenamingWhatTheChartLooksUp(t *testing.T) {
	for _, input := range []struct{ helm, manifests string }{{"Helm 3", lookupOutput}, {"Helm 4", helm4Form(t, lookupOutput)}} {
		t.Run(input.helm, func(t *testing.T) { testLookupRefusals(t, input.manifests) })
	}
}

func testLookupRefusals(t *testing.T, manifests string) {
	chart := lookupChart(t)
	tests := []struct {
		name, selected, allow string
		chart                 string // "" : the chart above; "-": no -chart
		refused               string // a substring of the one-line refusal; "" renders
	}{
		{name: "a Secret its template reads back through helpers", selected: "secret/app",
			refused: "Secret app: the chart looks it up by name: its template app/templates/secret.yaml calls lookup of Secrets (via app.data → app.password): renamed app-"},
		{name: "a computed kind in a packaged subchart's helper counts for any kind", selected: "secret/other",
			refused: "its template app/templates/other.yaml calls lookup (via common.get)"},
		{name: "a ConfigMap looked up directly", selected: "configmap/ports", refused: "calls lookup of ConfigMaps:"},
		{name: "a template without lookup", selected: "configmap/app-config"},
		{name: "a Secret whose template looks up only ConfigMaps", selected: "secret/cert"},
		{name: "allowed: the values are given", selected: "secret/app,secret/other", allow: "secret/app,secret/other"},
		{name: "without -chart nothing is checked", selected: "secret/app", chart: "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.Namespace = "ns"
			must(o.Select.Set(tc.selected))
			if tc.allow != "" {
				must(o.AllowLookup.Set(tc.allow))
			}
			switch tc.chart {
			case "":
				o.Chart = chart
			case "-":
			default:
				o.Chart = tc.chart
			}
			res, _, err := renderString(t, o, manifests)
			if tc.refused != "" {
				if !errors.Is(err, ErrLookup) || !strings.Contains(err.Error(), tc.refused) || strings.Contains(err.Error(), "\n") ||
					!strings.Contains(err.Error(), "-allow-lookup="+tc.selected) {
					t.Fatalf("err = %v\nwant one line refusing with %q and naming -allow-lookup=%s", err, tc.refused, tc.selected)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := len(strings.Split(tc.selected, ",")); len(res.renames) != want {
				t.Fatalf("renamed %v, want %d objects", res.renames, want)
			}
		})
	}
}

func TestLookupChartErrors(t *testing.T) {
	o := NewOptions()
	o.Chart = t.TempDir()
	must(o.Select.Set("secret/app"))
	_, _, err := renderString(t, o, lookupOutput)
	if err == nil || !strings.Contains(err.Error(), "not a chart (no Chart.yaml)") {
		t.Fatalf("err = %v, want the chart directory refused", err)
	}
}

// The public grafana chart (vendored for the e2e tests, the same snapshot testdata/charts/grafana.yaml
// was rendered from) generates its admin password and reads it back with lookup.
func TestLookupInAPublicChart(t *testing.T) {
	o := NewOptions()
	o.Namespace = "monitoring"
	o.Chart = filepath.Join("..", "..", "test", "e2e", "testdata", "charts", "grafana")
	must(o.Select.Set("configmap/graf-grafana,secret/graf-grafana,secret/graf-grafana-env"))
	input := readFixture(t, filepath.Join("charts", "grafana.yaml"))
	_, _, err := renderString(t, o, input)
	want := "Secret monitoring/graf-grafana: the chart looks it up by name: its template grafana/templates/secret.yaml calls lookup of Secrets (via grafana.secretsData → grafana.password)"
	if !errors.Is(err, ErrLookup) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant %q", err, want)
	}
	must(o.AllowLookup.Set("secret/graf-grafana"))
	if _, _, err := renderString(t, o, input); err != nil {
		t.Fatalf("with -allow-lookup: %v", err)
	}
}
