package testutil

import (
	"encoding/json"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil/charts"
)

// ChartPodSpec is a pod spec found in a rendered chart (package charts), as JSON.
type ChartPodSpec struct {
	// From says where: the file, the object and the path of the spec.
	From string
	JSON []byte
}

// ChartPodSpecs returns every pod spec of every object in the rendered charts, wherever the reference
// table says an object keeps them: realistic seeds for fuzz targets.
func ChartPodSpecs(tb testing.TB) []ChartPodSpec {
	tb.Helper()
	var out []ChartPodSpec
	for _, d := range charts.Docs(tb) {
		apiVersion, kind, name := d.Kind()
		for _, p := range refs.PodSpecPaths(apiVersion, kind, d.Obj) {
			if spec := p.In(d.Obj); spec != nil {
				raw, err := json.Marshal(spec)
				if err != nil {
					tb.Fatal(err)
				}
				out = append(out, ChartPodSpec{From: d.File + " " + kind + "/" + name + " " + p.String(), JSON: raw})
			}
		}
	}
	return out
}
