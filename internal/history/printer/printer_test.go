package printer

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/history/historytest"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func TestHistoryGolden(t *testing.T) {
	tests := []struct {
		golden  string
		fixture historytest.Fixture
		format  string
	}{
		{"history-canary.txt", historytest.Canary(), OutputTable},
		{"history-canary.json", historytest.Canary(), OutputJSON},
		{"history-canary.yaml", historytest.Canary(), OutputYAML},
		{"history-aborted.txt", historytest.Aborted(), OutputTable},
		{"history-missing.txt", historytest.Missing(), OutputTable},
		{"history-missing.json", historytest.Missing(), OutputJSON},
		{"history-deployment.txt", historytest.Deployment(), OutputTable},
		{"history-held.txt", historytest.Held(), OutputTable},
		{"history-held.json", historytest.Held(), OutputJSON},
		{"history-empty.txt", historytest.Fixture{Res: historytest.Resolved(workload.Rollout, historytest.Canary().Res.Rollout)}, OutputTable},
		{"history-pinned.txt", historytest.Pinned(), OutputTable},
		{"history-pinned.json", historytest.Pinned(), OutputJSON},
		{"history-pinned.yaml", historytest.Pinned(), OutputYAML},
		{"history-pinned-reverted.txt", historytest.PinnedReverted(), OutputTable},
		{"history-pinned-in-sync.txt", historytest.PinnedInSync(), OutputTable},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, tt.fixture.History(), tt.format, historytest.Now, Style{}); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.golden, b.Bytes())
		})
	}
}

func TestHistoryNeverReadsSecretValues(t *testing.T) {
	// History reads metadata only; even handed full objects, its output carries no value.
	for _, f := range []historytest.Fixture{historytest.Canary(), historytest.Pinned()} {
		for _, format := range []string{OutputTable, OutputJSON, OutputYAML} {
			var b bytes.Buffer
			if err := Write(&b, f.History(), format, historytest.Now, Style{}); err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"t0k3n", "hunter2", "projectName"} {
				if strings.Contains(b.String(), v) {
					t.Errorf("%s output contains a value %q", format, v)
				}
			}
		}
	}
}

func TestHistoryJSONFieldNames(t *testing.T) {
	// Scripts rely on these names: changing one is a breaking change.
	b, err := json.Marshal(historytest.Missing().History())
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

func TestPinnedJSONFieldNames(t *testing.T) {
	// Additive and omitted when unused, so scripts written before pinning see the same objects.
	b, err := json.Marshal(historytest.Pinned().History())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Revisions []struct {
			Config []map[string]any `json:"config"`
		} `json:"revisions"`
		Drift []map[string]any `json:"drift"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"pinned", "snapshot"} {
		if _, ok := got.Revisions[0].Config[0][k]; !ok {
			t.Errorf("pinned config lacks %q", k)
		}
	}
	for _, k := range []string{"kind", "name", "revision", "snapshot", "live"} {
		if len(got.Drift) == 0 {
			t.Fatal("no drift")
		}
		if _, ok := got.Drift[0][k]; !ok {
			t.Errorf("drift lacks %q", k)
		}
	}
	plain, err := json.Marshal(historytest.Canary().History())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"pinned"`, `"snapshot"`, `"drift"`} {
		if strings.Contains(string(plain), k) {
			t.Errorf("history without pinning has %s", k)
		}
	}
}

func TestColorOnlyWhenAsked(t *testing.T) {
	var plain, color bytes.Buffer
	h := historytest.Missing().History()
	if err := WriteTable(&plain, h, historytest.Now, Style{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&color, h, historytest.Now, Style{Color: true}); err != nil {
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

// goldenKey makes hidden-Secret hashes reproducible; real runs use a random key.
var goldenKey = []byte("golden files only")

func TestDiffGolden(t *testing.T) {
	tests := []struct {
		golden      string
		fixture     historytest.Fixture
		revisions   []int64
		showSecrets bool
		live        bool
	}{
		{golden: "diff-canary.diff", fixture: historytest.Canary()}, // the paused canary against stable
		{golden: "diff-canary-show-secrets.diff", fixture: historytest.Canary(), showSecrets: true},
		{golden: "diff-1-2.diff", fixture: historytest.Canary(), revisions: []int64{1, 2}},
		{golden: "diff-1-current.diff", fixture: historytest.Promoted(), revisions: []int64{1}},
		{golden: "diff-garbage-collected.diff", fixture: historytest.Missing(), revisions: []int64{1, 3}},
		{golden: "diff-no-changes.diff", fixture: historytest.Canary(), revisions: []int64{3, 3}},
		{golden: "diff-deployment.diff", fixture: historytest.Deployment()},
		{golden: "diff-reshaped.diff", fixture: historytest.Reshaped()},
		{golden: "diff-reshaped-show-secrets.diff", fixture: historytest.Reshaped(), showSecrets: true},
		{golden: "diff-pinned.diff", fixture: historytest.Pinned()}, // the canary's snapshots against stable's
		{golden: "diff-pinned-1-2.diff", fixture: historytest.Pinned(), revisions: []int64{1, 2}},
		{golden: "diff-pinned-live.diff", fixture: historytest.Pinned(), live: true},
		{golden: "diff-pinned-2-live.diff", fixture: historytest.Pinned(), revisions: []int64{2}, live: true},
		{golden: "diff-pinned-in-sync-live.diff", fixture: historytest.PinnedInSync(), live: true},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			h := tt.fixture.History()
			selectRevisions := history.Select
			if tt.live {
				selectRevisions = history.SelectLive
			}
			from, to, err := selectRevisions(h, tt.revisions)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			o := DiffOptions{ShowSecrets: tt.showSecrets, SecretKey: goldenKey, Context: DefaultContext}
			if err := WriteDiff(&b, history.Compare(h, from, to, tt.fixture.Objs), o); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.golden, b.Bytes())
			if !tt.showSecrets {
				for _, v := range []string{"t0k3n", "hunter2", "BEGIN CERTIFICATE", "info"} {
					if strings.Contains(b.String(), v) {
						t.Errorf("a Secret value (%q) is printed without --show-secrets", v)
					}
				}
			}
		})
	}
}

func TestDiffColorOnlyWhenAsked(t *testing.T) {
	f := historytest.Canary()
	h := f.History()
	from, to, _ := history.Select(h, []int64{1, 2})
	var plain, color bytes.Buffer
	c := history.Compare(h, from, to, f.Objs)
	_ = WriteDiff(&plain, c, DiffOptions{SecretKey: goldenKey, Context: 3})
	_ = WriteDiff(&color, c, DiffOptions{SecretKey: goldenKey, Context: 3, Style: Style{Color: true}})
	if strings.Contains(plain.String(), "\x1b[") {
		t.Error("plain diff has color codes")
	}
	if !strings.Contains(color.String(), ansiGreen+`+    "faulty": true`+ansiReset) {
		t.Errorf("added line not green:\n%q", color.String())
	}
}

func TestHiddenSecretHashesDependOnTheKey(t *testing.T) {
	f := historytest.Canary()
	h := f.History()
	from, to, _ := history.Select(h, []int64{1, 2})
	c := history.Compare(h, from, to, f.Objs)
	var a, b, random bytes.Buffer
	_ = WriteDiff(&a, c, DiffOptions{SecretKey: []byte("k1")})
	_ = WriteDiff(&b, c, DiffOptions{SecretKey: []byte("k2")})
	_ = WriteDiff(&random, c, DiffOptions{})
	if a.String() == b.String() {
		t.Error("different keys gave the same hashes")
	}
	if !strings.Contains(random.String(), "changed  API_TOKEN  hmac:") {
		t.Errorf("no hidden hash without a key:\n%s", random.String())
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/history/printer -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update if the change is intended)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
	if bytes.Contains(got, []byte("\x1b[")) {
		t.Errorf("%s contains color codes", path)
	}
}
