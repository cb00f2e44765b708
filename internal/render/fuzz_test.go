package render

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

// fuzzOptions derives flags from a byte, so the fuzzer explores them with the input; chart is a chart
// directory for -chart (lookupChart).
func fuzzOptions(mode uint8, chart string) *Options {
	o := NewOptions()
	o.AllConfigMaps = mode&1 != 0
	o.AllSecrets = mode&2 != 0
	if mode&4 != 0 {
		o.Namespace = "prod"
	}
	if mode&8 != 0 {
		must(o.Select.Set("configmap/cm,secret/sec,configmap/app-config"))
	}
	if mode&16 != 0 {
		o.Chart = chart
	}
	return o
}

// FuzzRender checks, for any input and flags: no panic; an error names a known kind of problem; and
// on success the output parses, every rewritten reference points at an object in the output, no
// reference is left pointing at the old name of a renamed object, and rendering the output again
// changes nothing.
func FuzzRender(f *testing.F) {
	fixtures, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(fixtures) == 0 {
		f.Fatalf("no fixtures: %v", err)
	}
	// The public charts (and the e2e tests' charts) as helm template rendered them.
	rendered, err := filepath.Glob(filepath.Join("testdata", "charts", "*.yaml"))
	if err != nil || len(rendered) == 0 {
		f.Fatalf("no rendered charts: %v", err)
	}
	fixtures = append(fixtures, rendered...)
	for _, p := range fixtures {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, mode := range []uint8{0, 3, 4, 15} {
			f.Add(b, mode)
		}
	}
	for _, tc := range errorCases() {
		f.Add([]byte(tc.input), uint8(0))
	}
	f.Add([]byte(docs(configMap("cm"), deployment("app", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: cm}}]"))), uint8(0))
	f.Add([]byte(lookupOutput), uint8(3|16))
	chart := lookupChart(f)
	f.Fuzz(func(t *testing.T, input []byte, mode uint8) {
		if len(input) > 1<<16 {
			t.Skip("large inputs only slow the fuzzer down")
		}
		opts := fuzzOptions(mode, chart)
		res, _, err := renderString(t, opts, string(input))
		if err != nil {
			known := false
			for _, s := range []error{ErrInvalidYAML, ErrNotObject, ErrInvalidObject, ErrDuplicate, ErrUnsafe, ErrUnreferencedRename, ErrLookup} {
				known = known || errors.Is(err, s)
			}
			var de *DocError
			if !known || !errors.As(err, &de) {
				t.Fatalf("error without a known kind or a document: %v", err)
			}
			return
		}

		out := parseOutput(t, res.out)
		checkKubectlWouldTake(t, input, out)
		ns := func(o *object) string {
			if o.namespace == "" {
				return opts.Namespace
			}
			return o.namespace
		}
		present := map[key]bool{}
		for _, o := range out {
			if k, ok := configKind(o); ok {
				present[key{k, ns(o), o.name}] = true
			}
		}
		for _, r := range res.rewrites {
			if !present[key{r.Kind, r.Namespace, r.To}] {
				t.Fatalf("reference %s rewritten to %s %s/%s, which is not in the output", pathString(r.Path), r.Kind, r.Namespace, r.To)
			}
		}
		renamedFrom := map[key]bool{}
		for _, r := range res.renames {
			n := r.Namespace
			if n == "" {
				n = opts.Namespace
			}
			renamedFrom[key{r.Kind, n, r.From}] = true
		}
		// Every place the reference table knows — pod templates of every kind, Argo Rollouts' analysis
		// and experiment templates, Ingress TLS, ServiceAccounts, ... — and in every namespace.
		for _, o := range out {
			uses, err := refs.ManifestUses(o.apiVersion, o.kind, o.raw)
			if err != nil {
				t.Fatalf("output %s: %v", o, err)
			}
			for _, u := range uses {
				n := ns(o)
				if u.Namespace != "" {
					n = u.Namespace
				}
				k := key{u.Kind, n, u.Name}
				if renamedFrom[k] && !present[k] {
					t.Fatalf("%s in %s still names %s, renamed away", pathString(u.Path), o, u.Ref)
				}
				for _, other := range []string{"", opts.Namespace, "prod", "default"} {
					if k2 := (key{u.Kind, other, u.Name}); other != n && renamedFrom[k2] && !present[k2] && (other == "" || n == "") {
						t.Fatalf("%s in %s names %s in namespace %q, while it was renamed away in namespace %q", pathString(u.Path), o, u.Ref, n, other)
					}
				}
			}
		}

		again, _, err := renderString(t, fuzzOptions(mode, chart), string(res.out))
		if err != nil {
			t.Fatalf("rendering the output again: %v\n%s", err, res.out)
		}
		if len(again.renames) != 0 || len(again.rewrites) != 0 {
			t.Fatalf("rendering the output again renamed %v, rewrote %v", again.renames, again.rewrites)
		}
		// Byte-for-byte equality holds for manifests as tools write them (see TestGolden), but yaml.v3
		// moves some oddly placed comments on each pass; what must not move is the meaning.
		if !sameDocuments(t, again.out, res.out) {
			t.Fatalf("rendering the output again changed it:\n%s\n---- became ----\n%s", res.out, again.out)
		}
	})
}

// checkKubectlWouldTake fails when the input would pass `kubectl apply --dry-run=client` (its strict
// decoding into the typed objects, config objects with valid names) and the output would not: every
// output object of a kind client-go knows must decode strictly, and every ConfigMap or Secret must
// keep a valid name after its rename. (Custom resources' schemas live in the cluster: not checked.)
func checkKubectlWouldTake(t *testing.T, input []byte, out []*object) {
	t.Helper()
	docs, err := parseStream("input", bytes.NewReader(input))
	if err != nil {
		return
	}
	for _, d := range docs {
		for _, o := range d.objects {
			if known, err := testutil.StrictDecode(o.raw); known && err != nil {
				return
			}
			if _, ok := configKind(o); ok && len(validation.IsDNS1123Subdomain(o.name)) > 0 {
				return
			}
		}
	}
	for _, o := range out {
		if known, err := testutil.StrictDecode(o.raw); known && err != nil {
			t.Fatalf("the input decodes strictly, output %s does not: %v", o, err)
		}
		if _, ok := configKind(o); ok {
			if msgs := validation.IsDNS1123Subdomain(o.name); len(msgs) > 0 {
				t.Fatalf("output %s: the renamed object's name is invalid: %v", o, msgs)
			}
		}
	}
}

// sameDocuments reports whether two outputs hold the same documents as Kubernetes reads them.
func sameDocuments(t *testing.T, a, b []byte) bool {
	t.Helper()
	da, err := parseStream("a", bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	db, err := parseStream("b", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(da) != len(db) {
		return false
	}
	for i := range da {
		if !jsonEqual(da[i].json, db[i].json) {
			return false
		}
	}
	return true
}
