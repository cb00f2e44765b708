// Package charts reads internal/render/testdata/charts: `helm template` output of public charts
// nobody here wrote, and of the charts the e2e tests install (its README says which and how), as the
// documents a test or a fuzz target's seeds start from. It imports nothing of ours, so every package's
// tests may use it.
package charts

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Doc is one object of a rendered chart, decoded as JSON decodes it.
type Doc struct {
	File string
	Obj  map[string]any
}

// Dir is internal/render/testdata/charts, found from the directory a test runs in (its package's):
// the module root is the nearest one up with go.mod. Not from this file's compiled path, which
// -trimpath (the Makefile's setting) makes relative.
func Dir() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "internal", "render", "testdata", "charts")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Docs returns every object of every rendered chart.
func Docs(tb testing.TB) []Doc {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(Dir(), "*.yaml"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no rendered charts in %s: %v", Dir(), err)
	}
	var out []Doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var obj map[string]any
			if err := d.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				tb.Fatalf("%s: %v", f, err)
			}
			if obj != nil {
				out = append(out, Doc{File: filepath.Base(f), Obj: obj})
			}
		}
	}
	return out
}

// Kind returns a document's apiVersion, kind and name.
func (d Doc) Kind() (apiVersion, kind, name string) {
	apiVersion, _ = d.Obj["apiVersion"].(string)
	kind, _ = d.Obj["kind"].(string)
	meta, _ := d.Obj["metadata"].(map[string]any)
	name, _ = meta["name"].(string)
	return apiVersion, kind, name
}
