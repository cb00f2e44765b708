package history

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func TestHistoryGolden(t *testing.T) {
	tests := []struct {
		golden  string
		fixture fixture
		format  string
	}{
		{"history-canary.txt", canary(), OutputTable},
		{"history-canary.json", canary(), OutputJSON},
		{"history-canary.yaml", canary(), OutputYAML},
		{"history-aborted.txt", aborted(), OutputTable},
		{"history-missing.txt", missing(), OutputTable},
		{"history-missing.json", missing(), OutputJSON},
		{"history-deployment.txt", deployment(), OutputTable},
		{"history-empty.txt", fixture{res: resolved(workload.Rollout, canary().res.Rollout)}, OutputTable},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, tt.fixture.history(), tt.format, now, Style{}); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.golden, b.Bytes())
		})
	}
}

func TestHistoryRows(t *testing.T) {
	type row struct {
		revision int64
		role     workload.Role
		config   string // name plus flags: !exists, ~not attached, ?optional
	}
	flags := func(c Config) string {
		s := c.Name
		if !c.Exists {
			s += "!"
		}
		if c.Exists && !c.Attached {
			s += "~"
		}
		if c.Optional {
			s += "?"
		}
		return s
	}
	tests := []struct {
		name    string
		fixture fixture
		want    []row
	}{
		{"canary: roles from the Rollout's status", canary(), []row{
			{3, workload.RoleCanary, "demo-cm-3849201934"},
			{2, workload.RoleStable, "demo-cm-1203412345"},
			{1, workload.RoleOld, "demo-cm-2648648036"}}},
		{"promoted: the current revision is the stable one", promoted(), []row{
			{3, workload.RoleStable, "demo-cm-3849201934"},
			{2, workload.RoleOld, "demo-cm-1203412345"},
			{1, workload.RoleOld, "demo-cm-2648648036"}}},
		{"missing objects, optional ones apart", missing(), []row{
			{3, workload.RoleCanary, "demo-cm-3849201934 demo-flags-1a2b3c4d5e!? db-creds~ demo-env-0d1e2f3a4b~"},
			{2, workload.RoleStable, "demo-cm-1203412345!"},
			{1, workload.RoleOld, "demo-cm-2648648036!"}}},
		{"deployment: current by template", deployment(), []row{
			{2, workload.RoleCurrent, "web-config-9f8e7d6c5b"},
			{1, workload.RoleOld, "web-config-0a1b2c3d4e"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.fixture.history()
			if len(h.Revisions) != len(tt.want) {
				t.Fatalf("%d revisions, want %d", len(h.Revisions), len(tt.want))
			}
			for i, want := range tt.want {
				r := h.Revisions[i]
				var cfg []string
				for _, c := range r.Config {
					cfg = append(cfg, flags(c))
				}
				if r.Revision != want.revision || r.Role != want.role {
					t.Errorf("row %d = revision %d %s, want %d %s", i, r.Revision, r.Role, want.revision, want.role)
				}
				for _, name := range strings.Fields(want.config) {
					if !strings.Contains(" "+strings.Join(cfg, " ")+" ", " "+name+" ") {
						t.Errorf("row %d config %v lacks %s", i, cfg, name)
					}
				}
			}
		})
	}
}

func TestHistoryNeverReadsSecretValues(t *testing.T) {
	// History reads metadata only; even handed full objects, its output carries no value.
	for _, format := range []string{OutputTable, OutputJSON, OutputYAML} {
		var b bytes.Buffer
		if err := Write(&b, canary().history(), format, now, Style{}); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"t0k3n", "hunter2"} {
			if strings.Contains(b.String(), v) {
				t.Errorf("%s output contains a Secret value %q", format, v)
			}
		}
	}
}

func TestHistoryJSONFieldNames(t *testing.T) {
	// Scripts rely on these names: changing one is a breaking change.
	b, err := json.Marshal(missing().history())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Workload  map[string]any   `json:"workload"`
		Revisions []map[string]any `json:"revisions"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kind", "namespace", "name", "phase", "aborted"} {
		if _, ok := got.Workload[k]; !ok {
			t.Errorf("workload lacks %q", k)
		}
	}
	for _, k := range []string{"revision", "replicaSet", "podTemplateHash", "role", "pods", "creationTimestamp", "config"} {
		if _, ok := got.Revisions[0][k]; !ok {
			t.Errorf("revision lacks %q", k)
		}
	}
	cfg := got.Revisions[0]["config"].([]any)[0].(map[string]any)
	for _, k := range []string{"kind", "name", "originalName", "exists", "attached", "revisioned", "optional"} {
		if _, ok := cfg[k]; !ok {
			t.Errorf("config lacks %q", k)
		}
	}
}

func TestColorOnlyWhenAsked(t *testing.T) {
	var plain, color bytes.Buffer
	h := missing().history()
	if err := WriteTable(&plain, h, now, Style{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&color, h, now, Style{Color: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\x1b[") {
		t.Error("plain output has color codes")
	}
	if !strings.Contains(color.String(), ansiRed+"configmap/demo-cm-1203412345 (MISSING)"+ansiReset) {
		t.Errorf("the missing ConfigMap is not red:\n%q", color.String())
	}
	// Stripped of its codes, the colored table is the plain one: colors never shift columns.
	stripped := strings.NewReplacer(ansiRed, "", ansiYellow, "", ansiReset, "").Replace(color.String())
	if stripped != plain.String() {
		t.Errorf("colored table differs from the plain one once stripped:\n%s\nvs\n%s", stripped, plain.String())
	}
}

func TestOriginalName(t *testing.T) {
	annotated := configMap(meta("demo-env-0d1e2f3a4b", "demo-env", true), nil)
	tests := []struct {
		o    *Object
		name string
		want string
	}{
		{annotated, "demo-env-0d1e2f3a4b", "demo-env"},
		{nil, "demo-cm-2648648036", "demo-cm"},   // the original chart: adler32 in decimal
		{nil, "demo-env-0d1e2f3a4b", "demo-env"}, // the renderer's hash, object gone
		{nil, "demo-cm-v2", "demo-cm-v2"},
		{nil, "app-config", "app-config"},
		{nil, "db-creds", "db-creds"},
		{nil, "kube-root-ca.crt", "kube-root-ca.crt"},
		{nil, "app-config-Abc123", "app-config-Abc123"},
		{nil, "x-1234567", "x"},
	}
	for _, tt := range tests {
		if got := OriginalName(tt.o, tt.name); got != tt.want {
			t.Errorf("OriginalName(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}
