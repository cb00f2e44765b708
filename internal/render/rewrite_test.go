package render

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

func rewritePaths(res *result) []string {
	var out []string
	for _, r := range res.rewrites {
		out = append(out, pathString(r.Path))
	}
	return out
}

func TestReferenceKinds(t *testing.T) {
	secret := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: sec\n  labels: {configmap-attacher.io/revisioned: \"true\"}\nstringData: {k: v}\n"
	const prefix = "spec.template.spec."
	tests := []struct {
		name    string
		podSpec string
		want    []string // paths under the pod spec
	}{
		{"volume configMap", "volumes:\n- name: v\n  configMap: {name: cm}", []string{"volumes[0].configMap.name"}},
		{"volume secret", "volumes:\n- name: v\n  secret: {secretName: sec}", []string{"volumes[0].secret.secretName"}},
		{"projected configMap and secret", "volumes:\n- name: v\n  projected:\n    sources:\n    - serviceAccountToken: {path: t}\n    - configMap: {name: cm}\n    - secret: {name: sec}",
			[]string{"volumes[0].projected.sources[1].configMap.name", "volumes[0].projected.sources[2].secret.name"}},
		{"envFrom configMapRef", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: cm}}]", []string{"containers[0].envFrom[0].configMapRef.name"}},
		{"envFrom secretRef", "containers:\n- name: c\n  envFrom: [{secretRef: {name: sec}}]", []string{"containers[0].envFrom[0].secretRef.name"}},
		{"env configMapKeyRef", "containers:\n- name: c\n  env: [{name: E, valueFrom: {configMapKeyRef: {name: cm, key: k}}}]", []string{"containers[0].env[0].valueFrom.configMapKeyRef.name"}},
		{"env secretKeyRef", "containers:\n- name: c\n  env: [{name: E, valueFrom: {secretKeyRef: {name: sec, key: k}}}]", []string{"containers[0].env[0].valueFrom.secretKeyRef.name"}},
		{"initContainers", "initContainers:\n- name: i\n  envFrom: [{configMapRef: {name: cm}}]\n  env: [{name: E, valueFrom: {secretKeyRef: {name: sec, key: k}}}]\ncontainers:\n- name: c",
			[]string{"initContainers[0].envFrom[0].configMapRef.name", "initContainers[0].env[0].valueFrom.secretKeyRef.name"}},
		{"second container", "containers:\n- name: a\n- name: b\n  envFrom: [{configMapRef: {name: cm}}]", []string{"containers[1].envFrom[0].configMapRef.name"}},
		{"unrelated names untouched", "volumes:\n- name: v\n  configMap: {name: other}\n- name: w\n  secret: {secretName: cm}", nil},
		{"kind matters: a Secret named like the ConfigMap", "containers:\n- name: c\n  envFrom: [{secretRef: {name: cm}}, {configMapRef: {name: sec}}]", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, logs := mustRender(t, nil, docs(configMap("cm"), secret, deployment("app", tc.podSpec)))
			var want []string
			for _, p := range tc.want {
				want = append(want, prefix+p)
			}
			if got := rewritePaths(res); !reflect.DeepEqual(got, want) {
				t.Errorf("rewrote %q, want %q", got, want)
			}
			// What the output's pod spec references is what refs.Uses finds there.
			out := parseOutput(t, res.out)
			uses := usesOf(t, out, "app")
			for _, u := range uses {
				if u.Ref == (refs.Ref{Kind: refs.ConfigMap, Name: "cm"}) || u.Ref == (refs.Ref{Kind: refs.Secret, Name: "sec"}) {
					t.Errorf("%s still references %s", pathString(u.Path), u.Ref)
				}
			}
			if strings.Contains(logs, "left as is") {
				t.Errorf("unexpected warnings: %s", logs)
			}
		})
	}
}

// parseOutput reads rendered output back into objects.
func parseOutput(t testing.TB, out []byte) []*object {
	t.Helper()
	ds, err := parseStream("output", strings.NewReader(string(out)))
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, out)
	}
	var objs []*object
	for _, d := range ds {
		objs = append(objs, d.objects...)
	}
	return objs
}

// usesOf returns the references of the pod specs of the workload named name in objs, with paths
// from the pod spec.
func usesOf(t testing.TB, objs []*object, name string) []refs.Use {
	t.Helper()
	for _, o := range objs {
		if o.name != name || len(refs.PodSpecPaths(o.apiVersion, o.kind, nil)) == 0 {
			continue
		}
		uses, err := refs.ManifestUses(o.apiVersion, o.kind, o.raw)
		if err != nil {
			t.Fatal(err)
		}
		prefix := len(refs.PodSpecPaths(o.apiVersion, o.kind, nil)[0])
		var out []refs.Use
		for _, u := range uses {
			if !u.Outside {
				u.Path = u.Path[prefix:]
				out = append(out, u)
			}
		}
		return out
	}
	t.Fatalf("no workload %s in the output", name)
	return nil
}

func TestWorkloadKinds(t *testing.T) {
	res, _ := mustRender(t, nil, readFixture(t, "workloads.yaml"))
	got := map[string]string{}
	for _, r := range res.rewrites {
		for _, d := range res.docs {
			if d.index == r.Doc {
				got[d.objects[0].name] = pathString(r.Path)
			}
		}
	}
	const ref = "containers[0].envFrom[0].configMapRef.name"
	want := map[string]string{
		"rollout":               "spec.template.spec." + ref,
		"deployment":            "spec.template.spec." + ref,
		"statefulset":           "spec.template.spec." + ref,
		"daemonset":             "spec.template.spec." + ref,
		"replicaset":            "spec.template.spec." + ref,
		"job":                   "spec.template.spec." + ref,
		"cronjob":               "spec.jobTemplate.spec.template.spec." + ref,
		"pod":                   "spec." + ref,
		"podtemplate":           "template.spec." + ref,
		"replicationcontroller": "spec.template.spec." + ref,
		"old-deployment":        "spec.template.spec." + ref,
		// custom (example.com Deployment), svc and the Rollout with a workloadRef: nothing.
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rewrites by workload:\n got %v\nwant %v", got, want)
	}
}

func TestLists(t *testing.T) {
	res, _ := mustRender(t, nil, readFixture(t, "list.yaml"))
	var got []string
	for _, r := range res.rewrites {
		got = append(got, pathString(r.Path))
	}
	want := []string{
		"items[1].spec.template.spec.containers[0].envFrom[0].configMapRef.name",
		"items[0].spec.containers[0].env[0].valueFrom.secretKeyRef.name",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rewrites %q, want %q", got, want)
	}
	var renamed []string
	for _, r := range res.renames {
		renamed = append(renamed, r.From)
	}
	if want := []string{"listed", "listed-secret"}; !reflect.DeepEqual(renamed, want) {
		t.Errorf("renamed %q, want %q", renamed, want)
	}
}

func TestNamespaces(t *testing.T) {
	cm := func(ns string) string {
		if ns == "" {
			return configMap("cm")
		}
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: " + ns + "\n  labels: {configmap-attacher.io/revisioned: \"true\"}\ndata: {k: v}\n"
	}
	workload := func(ns string) string {
		d := deployment("app", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: cm}}]")
		if ns != "" {
			d = strings.Replace(d, "  name: app\n", "  name: app\n  namespace: "+ns+"\n", 1)
		}
		return d
	}
	tests := []struct {
		name                   string
		cmNS, workloadNS, flag string
		rewritten              bool
		warning                string
		refused                bool // the namespace of one side is unknown: renaming would break the reference
	}{
		{name: "both without namespace", rewritten: true},
		{name: "both in prod", cmNS: "prod", workloadNS: "prod", rewritten: true},
		{name: "different namespaces", cmNS: "prod", workloadNS: "dev", warning: "another namespace"},
		{name: "config in prod, workload without, no flag", cmNS: "prod", refused: true},
		{name: "config without, workload in prod, no flag", workloadNS: "prod", refused: true},
		{name: "config in prod, workload without, -namespace=prod", cmNS: "prod", flag: "prod", rewritten: true},
		{name: "config without, workload in prod, -namespace=prod", workloadNS: "prod", flag: "prod", rewritten: true},
		{name: "config without, workload in prod, -namespace=dev", workloadNS: "prod", flag: "dev", warning: "another namespace"},
		{name: "both without, any -namespace", flag: "dev", rewritten: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := NewOptions()
			opts.Namespace = tc.flag
			if tc.refused {
				_, _, err := renderString(t, opts, docs(cm(tc.cmNS), workload(tc.workloadNS)))
				if !errors.Is(err, ErrUnreferencedRename) || !strings.Contains(err.Error(), "-namespace=prod") {
					t.Fatalf("err = %v; want a refusal saying -namespace=prod", err)
				}
				return
			}
			res, logs := mustRender(t, opts, docs(cm(tc.cmNS), workload(tc.workloadNS)))
			if got := len(res.rewrites) == 1; got != tc.rewritten {
				t.Errorf("rewritten = %v, want %v", got, tc.rewritten)
			}
			if len(res.renames) != 1 {
				t.Errorf("the ConfigMap must be renamed whatever its users: %v", res.renames)
			}
			if tc.warning == "" && logs != "" || !strings.Contains(logs, tc.warning) {
				t.Errorf("logs %q, want a warning containing %q", logs, tc.warning)
			}
		})
	}
}

func TestSameNameInTwoNamespacesIsNotADuplicate(t *testing.T) {
	res, _ := mustRender(t, &Options{Namespace: "prod"}, readFixture(t, "namespaces.yaml"))
	if len(res.renames) != 2 {
		t.Errorf("renames %v, want both", res.renames)
	}
}

func TestSelection(t *testing.T) {
	input := readFixture(t, "select.yaml")
	tests := []struct {
		name string
		opts func(*Options)
		want []string // renamed, in input order
	}{
		{name: "labels only", want: nil},
		{name: "select one", opts: func(o *Options) { must(o.Select.Set("configmap/plain")) }, want: []string{"plain"}},
		{name: "select kinds are distinct", opts: func(o *Options) { must(o.Select.Set("secret/plain,configmap/creds")) }, want: nil},
		{name: "select twice", opts: func(o *Options) { must(o.Select.Set("cm/plain")); must(o.Select.Set("secrets/creds")) }, want: []string{"plain", "creds"}},
		{name: "label false wins over select", opts: func(o *Options) { must(o.Select.Set("configmap/shared-with-others")) }, want: nil},
		{name: "all configmaps", opts: func(o *Options) { o.AllConfigMaps = true }, want: []string{"plain"}},
		{name: "all secrets", opts: func(o *Options) { o.AllSecrets = true }, want: []string{"creds"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := NewOptions()
			if tc.opts != nil {
				tc.opts(opts)
			}
			res, _ := mustRender(t, opts, input)
			var got []string
			for _, r := range res.renames {
				got = append(got, r.From)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("renamed %q, want %q", got, tc.want)
			}
			if len(res.rewrites) != len(tc.want) {
				t.Errorf("rewrote %d references, want %d", len(res.rewrites), len(tc.want))
			}
		})
	}
}

func TestAddedMetadata(t *testing.T) {
	tests := []struct {
		name, input string
	}{
		{"no labels or annotations", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata: {k: v}\n"},
		{"null labels and annotations", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  labels:\n  annotations: ~\ndata: {k: v}\n"},
		{"immutable false", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, annotations: {helm.sh/resource-policy: delete}}\nimmutable: false\ndata: {k: v}\n"},
		{"flow style", "{apiVersion: v1, kind: ConfigMap, metadata: {name: cm}, data: {k: v}}\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := NewOptions()
			opts.AllConfigMaps = true
			res, _ := mustRender(t, opts, tc.input)
			o := parseOutput(t, res.out)[0]
			if o.name != "cm-8338386bc0" {
				t.Errorf("name %q", o.name)
			}
			if o.labels[api.RevisionedLabel] != "true" || o.annotations[api.OriginalNameAnnotation] != "cm" || o.annotations[HelmResourcePolicyAnnotation] != "keep" {
				t.Errorf("labels %v annotations %v", o.labels, o.annotations)
			}
			var v struct{ Immutable bool }
			must(yaml.Unmarshal(res.out, &v))
			if !v.Immutable {
				t.Errorf("not immutable:\n%s", res.out)
			}
		})
	}
}

// TestRerender is about rendering output again, alone or mixed with unrendered manifests.
func TestRerender(t *testing.T) {
	first, _ := mustRender(t, nil, docs(configMap("app"), deployment("app", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: app}}]")))
	rendered := string(first.out)
	renderedName := first.renames[0].To
	cmDoc, deployDoc, _ := strings.Cut(strings.TrimPrefix(rendered, "---\n"), "---\n")

	t.Run("unchanged output is left alone", func(t *testing.T) {
		res, _ := mustRender(t, nil, rendered)
		if string(res.out) != rendered || len(res.renames)+len(res.rewrites) != 0 {
			t.Errorf("changed: %v %v\n%s", res.renames, res.rewrites, res.out)
		}
	})
	t.Run("a workload naming the original reaches the rendered object", func(t *testing.T) {
		res, _ := mustRender(t, nil, docs(cmDoc, deployment("other", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: app}}]")))
		if len(res.renames) != 0 || len(res.rewrites) != 1 || res.rewrites[0].To != renderedName {
			t.Errorf("renames %v rewrites %v", res.renames, res.rewrites)
		}
	})
	t.Run("edited content gets a new revision of the original name", func(t *testing.T) {
		edited := strings.Replace(cmDoc, "data: {k: v}", "data: {k: changed}", 1)
		res, _ := mustRender(t, nil, docs(edited, deployDoc))
		if len(res.renames) != 1 || res.renames[0].From != renderedName || !strings.HasPrefix(res.renames[0].To, "app-") || res.renames[0].To == renderedName {
			t.Fatalf("renames %v", res.renames)
		}
		if len(res.rewrites) != 1 || res.rewrites[0].From != renderedName || res.rewrites[0].To != res.renames[0].To {
			t.Errorf("rewrites %v", res.rewrites)
		}
		if o := parseOutput(t, res.out)[0]; o.annotations[api.OriginalNameAnnotation] != "app" {
			t.Errorf("original name annotation %v", o.annotations)
		}
	})
	t.Run("a hash-like suffix without our annotation is part of the name", func(t *testing.T) {
		res, _ := mustRender(t, nil, configMap(renderedName))
		if len(res.renames) != 1 || res.renames[0].To != renderedName+"-8338386bc0" {
			t.Errorf("renames %v", res.renames)
		}
	})
	t.Run("an annotation that does not match the name is overwritten", func(t *testing.T) {
		res, _ := mustRender(t, nil, configMap("mine", "  annotations: {configmap-attacher.io/name: someone-else}"))
		if len(res.renames) != 1 || res.renames[0].To != "mine-8338386bc0" {
			t.Errorf("renames %v", res.renames)
		}
	})
}

func readFixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
