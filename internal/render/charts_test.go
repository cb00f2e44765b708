package render

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Public charts nobody here wrote, as `helm template` rendered them (testdata/charts/README.md: source,
// version, command). Rendered with what their README says to opt in, every reference must resolve and
// nothing may be left naming a renamed object; where renaming would strand a reference the table cannot
// rewrite (a ServiceAccount's Secret, a name inside a container argument), render must refuse, saying
// where. Re-rendering the output changes nothing.
func TestPublicCharts(t *testing.T) {
	tests := []struct {
		file, namespace, selected string
		all                       bool
		renamed                   int
		refused                   string // a substring of the refusal
	}{
		{file: "grafana.yaml", namespace: "monitoring", renamed: 4,
			selected: "configmap/graf-grafana,configmap/graf-grafana-dashboards-default,configmap/graf-grafana-config-dashboards,secret/graf-grafana-env"},
		{file: "fluent-bit.yaml", namespace: "logging", renamed: 2, selected: "configmap/fb-fluent-bit,configmap/fb-fluent-bit-luascripts"},
		{file: "prometheus-node-exporter.yaml", namespace: "monitoring", renamed: 1, selected: "configmap/ne-prometheus-node-exporter-rbac-config"},
		{file: "external-dns.yaml", namespace: "external-dns", renamed: 1, selected: "secret/edns-external-dns"},
		{file: "postgresql.yaml", namespace: "db", renamed: 5, selected: "configmap/pg-postgresql-primary-extended-configuration," +
			"configmap/pg-postgresql-primary-init-scripts,configmap/pg-postgresql-primary-metrics,configmap/pg-postgresql-read-extended-configuration,configmap/pg-postgresql-read-metrics"},
		{file: "postgresql-password-update.yaml", namespace: "db", all: true, renamed: 8}, // the script that starts with an empty line
		{file: "rabbitmq.yaml", namespace: "messaging", renamed: 4,
			selected: "secret/mq-rabbitmq-config,configmap/mq-rabbitmq-init-scripts,secret/mq-extra-env-secret,secret/mq-load-definition"},
		{file: "rabbitmq.yaml", namespace: "messaging", selected: "secret/mq-rabbitmq", refused: "ServiceAccount messaging/mq-rabbitmq: a reference would be left behind: secrets[0].name"},
		{file: "rabbitmq.yaml", namespace: "messaging", selected: "secret/rabbitmq.example.org-tls", refused: "Ingress messaging/mq-rabbitmq: a reference would be left behind: spec.tls[0].secretName"},
		{file: "ingress-nginx.yaml", namespace: "ingress-nginx", selected: "configmap/ingress-nginx-controller",
			// args[2] is --publish-service (a Service of the same name), args[6] --configmap: either way the
			// name would be left behind in a string.
			refused: "spec.template.spec.containers[0].args[2] names ConfigMap ingress-nginx/ingress-nginx-controller inside a string"},
		{file: "ingress-nginx.yaml", namespace: "ingress-nginx", selected: "configmap/ingress-nginx-custom-add-headers",
			refused: "data.add-headers names ConfigMap ingress-nginx/ingress-nginx-custom-add-headers inside a string"},
	}
	for _, tc := range tests {
		t.Run(tc.file+" "+tc.selected, func(t *testing.T) {
			opts := func() *Options {
				o := NewOptions()
				o.Namespace = tc.namespace
				o.AllConfigMaps, o.AllSecrets = tc.all, tc.all
				if tc.selected != "" {
					must(o.Select.Set(tc.selected))
				}
				return o
			}
			input := readFixture(t, filepath.Join("charts", tc.file))
			res, _, err := renderString(t, opts(), input)
			if tc.refused != "" {
				if !errors.Is(err, ErrUnreferencedRename) || !strings.Contains(err.Error(), tc.refused) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err = %v\nwant one line refusing with %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(res.renames) != tc.renamed {
				t.Errorf("renamed %d objects, want %d: %v", len(res.renames), tc.renamed, res.renames)
			}
			expectEveryReferenceResolves(t, res, tc.namespace)
			again, _, err := renderString(t, opts(), string(res.out))
			if err != nil || len(again.renames) != 0 || len(again.rewrites) != 0 || string(again.out) != string(res.out) {
				t.Fatalf("re-render: err %v, renamed %v, rewrote %v, same bytes %v", err, again.renames, again.rewrites, string(again.out) == string(res.out))
			}
		})
	}
}

// expectEveryReferenceResolves: no reference, anywhere the table looks, names a renamed object's old
// name, and every rewritten reference names an object of the output.
func expectEveryReferenceResolves(t *testing.T, res *result, namespace string) {
	t.Helper()
	out := parseOutput(t, res.out)
	ns := func(o *object) string {
		if o.namespace == "" {
			return namespace
		}
		return o.namespace
	}
	present := map[key]bool{}
	for _, o := range out {
		if k, ok := configKind(o); ok {
			present[key{k, ns(o), o.name}] = true
		}
	}
	gone := map[key]bool{}
	for _, r := range res.renames {
		n := r.Namespace
		if n == "" {
			n = namespace
		}
		gone[key{r.Kind, n, r.From}] = true
	}
	for _, r := range res.rewrites {
		if !present[key{r.Kind, r.Namespace, r.To}] {
			t.Errorf("%s rewritten to %s %s, not in the output", pathString(r.Path), r.Kind, r.To)
		}
	}
	for _, o := range out {
		uses, err := refs.ManifestUses(o.apiVersion, o.kind, o.raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range uses {
			n := ns(o)
			if u.Namespace != "" {
				n = u.Namespace
			}
			if k := (key{u.Kind, n, u.Name}); gone[k] && !present[k] {
				t.Errorf("%s %s still names %s, renamed away", o, pathString(u.Path), u.Ref)
			}
		}
	}
}
