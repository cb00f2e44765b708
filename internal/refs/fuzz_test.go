package refs

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/configmap-attacher/configmap-attacher/internal/testutil/charts"
)

// FuzzUses walks any pod spec, seeded with every pod spec of the rendered public charts, and checks:
// no panic; every use's path leads, in the spec as the API server would serialize it, to the very
// name it reports, under volumes, imagePullSecrets or a container's env/envFrom and nowhere else;
// FromPodSpec is the set of those uses; and in a raw manifest holding the spec as given (whatever its
// key order or extra fields), ManifestUses' paths lead to the names too, since render rewrites the
// raw manifest at those paths.
func FuzzUses(f *testing.F) {
	for _, d := range charts.Docs(f) {
		apiVersion, kind, _ := d.Kind()
		for _, p := range PodSpecPaths(apiVersion, kind, d.Obj) {
			if spec, err := json.Marshal(p.In(d.Obj)); err == nil && string(spec) != "null" {
				f.Add(spec)
			}
		}
	}
	f.Add([]byte(`{"volumes":[{"name":"a","configMap":{"name":""}},{"name":"b","projected":{"sources":[{"secret":{"name":"s"}},{"configMap":{"name":"c"}}]}}]}`))
	f.Add([]byte(`{"containers":[{"name":"c","env":[{"name":"A","valueFrom":{"configMapKeyRef":{"name":"cm","key":"k"},"secretKeyRef":{"name":"s","key":"k"}}}]}]}`))
	f.Add([]byte(`{"volumes":[{"name":"v","csi":{"driver":"d","nodePublishSecretRef":{"name":"s"}},"azureFile":{"secretName":"x"}}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var spec corev1.PodSpec
		if err := utiljson.Unmarshal(raw, &spec); err != nil {
			return // the API server refuses it too
		}
		uses := Uses(&spec)
		canonical, err := json.Marshal(&spec)
		if err != nil {
			t.Fatal(err)
		}
		var tree map[string]any
		if err := json.Unmarshal(canonical, &tree); err != nil {
			t.Fatal(err)
		}
		set := FromPodSpec(&spec)
		for _, u := range uses {
			if got := u.Path.In(tree); got != u.Name {
				t.Fatalf("%s: the path leads to %v in the serialized spec, not to %q", u.Path, got, u.Name)
			}
			if !u.Path.InVolumesOrEnv() && (len(u.Path) != 3 || u.Path[0] != "imagePullSecrets") {
				t.Fatalf("%s names %s outside volumes, imagePullSecrets and env/envFrom", u.Path, u.Ref)
			}
			if !set.Has(u.Ref) {
				t.Fatalf("FromPodSpec lacks %s used at %s", u.Ref, u.Path)
			}
		}
		for r := range set {
			if !containsRef(uses, r) {
				t.Fatalf("FromPodSpec has %s, which no use names", r)
			}
		}

		manifest := append(append([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{"spec":`), raw...), "}}}"...)
		mUses, err := ManifestUses("apps/v1", "Deployment", manifest)
		if err != nil {
			return
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(manifest, &obj); err != nil {
			t.Fatalf("ManifestUses read a manifest that does not decode: %v", err)
		}
		if len(mUses) != len(uses) {
			t.Fatalf("ManifestUses found %d uses in the raw manifest, Uses %d in the spec", len(mUses), len(uses))
		}
		for _, u := range mUses {
			if got := u.Path.In(obj); got != u.Name {
				t.Fatalf("%s: the path leads to %v in the raw manifest, not to %q", u.Path, got, u.Name)
			}
		}
	})
}

func containsRef(uses []Use, r Ref) bool {
	for _, u := range uses {
		if u.Ref == r {
			return true
		}
	}
	return false
}
