package render

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenCases are the fixtures under testdata and the flags each is rendered with.
var goldenCases = []struct {
	fixture, golden string
	opts            func(*Options)
}{
	{fixture: "references.yaml", golden: "references.yaml"},
	{fixture: "workloads.yaml", golden: "workloads.yaml"},
	{fixture: "list.yaml", golden: "list.yaml"},
	{fixture: "namespaces.yaml", golden: "namespaces.prod.yaml", opts: func(o *Options) { o.Namespace = "prod" }},
	{fixture: "helm.yaml", golden: "helm.yaml"},
	{fixture: "secrets.yaml", golden: "secrets.yaml"},
	{fixture: "select.yaml", golden: "select.yaml"},
	{fixture: "select.yaml", golden: "select.select.yaml", opts: func(o *Options) {
		must(o.Select.Set("configmap/plain,secret/creds"))
		must(o.Select.Set("cm/shared-with-others"))
	}},
	{fixture: "select.yaml", golden: "select.all.yaml", opts: func(o *Options) { o.AllConfigMaps, o.AllSecrets = true, true }},
	{fixture: "anchors.yaml", golden: "anchors.yaml"},
	{fixture: "styles.yaml", golden: "styles.yaml"},
	{fixture: "blockscalars.yaml", golden: "blockscalars.yaml"},
	{fixture: "argo.yaml", golden: "argo.yaml"},
	{fixture: "volumes.yaml", golden: "volumes.yaml"},
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func goldenOptions(i int) *Options {
	o := NewOptions()
	if goldenCases[i].opts != nil {
		goldenCases[i].opts(o)
	}
	return o
}

// TestGolden renders each fixture and compares with testdata/golden; rendering the result again must
// give the same bytes and report nothing renamed or rewritten.
func TestGolden(t *testing.T) {
	for i, tc := range goldenCases {
		t.Run(tc.golden, func(t *testing.T) {
			opts := goldenOptions(i)
			opts.Files = []string{filepath.Join("testdata", tc.fixture)}
			var out bytes.Buffer
			if err := Run(context.Background(), opts, strings.NewReader(""), &out); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", tc.golden)
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != string(want) {
				t.Errorf("output differs from %s (run go test ./internal/render -update to accept):\n%s", golden, out.String())
			}

			again, _ := mustRender(t, goldenOptions(i), out.String())
			if string(again.out) != out.String() {
				t.Errorf("rendering the output again changed it:\n%s", again.out)
			}
			if len(again.renames) != 0 || len(again.rewrites) != 0 {
				t.Errorf("rendering the output again renamed %v and rewrote %v", again.renames, again.rewrites)
			}
		})
	}
}
