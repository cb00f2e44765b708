package render

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// errorCase is an input the renderer must refuse; the fuzzer starts from these too.
type errorCase struct {
	name  string
	input string
	opts  func(*Options)
	want  error
	msg   []string // substrings of the message
}

func errorCases() []errorCase {
	cm := configMap("cm")
	cmIn := func(ns string) string {
		return strings.Replace(cm, "  name: cm\n", "  name: cm\n  namespace: "+ns+"\n", 1)
	}
	plainCM := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {k: v}\n"
	workload := deployment("app", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: cm}}]")
	return []errorCase{
		{name: "unparsable YAML", input: "kind: [\n", want: ErrInvalidYAML, msg: []string{"stdin: document 1"}},
		{name: "unparsable third document", input: docs(cm, workload, "a: b: c\n"), want: ErrInvalidYAML, msg: []string{"document 3"}},
		{name: "tab indentation", input: docs(cm, "apiVersion: v1\nkind: Secret\nmetadata:\n\tname: s\n"), want: ErrInvalidYAML, msg: []string{"document 2"}},
		{name: "duplicate key", input: docs(cm, "apiVersion: v1\nkind: Service\nkind: Pod\nmetadata: {name: x}\n"), want: ErrInvalidYAML, msg: []string{"document 2", "already defined"}},
		{name: "alias bomb", input: "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nkind: X\n", want: ErrInvalidYAML},
		{name: "not a mapping", input: docs(cm, "- a\n- b\n"), want: ErrNotObject, msg: []string{"document 2", "mapping"}},
		{name: "a string", input: "hello\n", want: ErrNotObject, msg: []string{"document 1"}},
		{name: "no kind", input: docs(cm, "apiVersion: v1\nmetadata: {name: x}\n"), want: ErrNotObject, msg: []string{"document 2", "no kind"}},
		{name: "no name", input: docs(cm, workload, "apiVersion: v1\nkind: Service\nmetadata: {labels: {a: b}}\n"), want: ErrNotObject, msg: []string{"document 3", "no metadata.name"}},
		{name: "kind not a string", input: "apiVersion: v1\nkind: [a]\nmetadata: {name: x}\n", want: ErrNotObject, msg: []string{"document 1"}},
		{name: "metadata not a mapping", input: "apiVersion: v1\nkind: Service\nmetadata: x\n", want: ErrNotObject},
		{name: "list item without name", input: "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(strings.TrimSpace(cm), "\n", "\n  ") + "\n- {apiVersion: v1, kind: Service, metadata: {}}\n", want: ErrNotObject, msg: []string{"document 1 item 2 (line 11), Service: "}},
		{name: "list items not a list", input: "apiVersion: v1\nkind: List\nitems: {a: b}\n", want: ErrNotObject, msg: []string{"items"}},
		{name: "two opted-in objects with one name", input: docs(cm, workload, cm), want: ErrDuplicate, msg: []string{"document 3", "ConfigMap cm", "document 1"}},
		{name: "opted-in and plain object with one name", input: docs(plainCM, cm), want: ErrDuplicate, msg: []string{"document 2", "document 1"}},
		{name: "plain then opted-in by flag", input: docs(plainCM, plainCM), opts: func(o *Options) { o.AllConfigMaps = true }, want: ErrDuplicate},
		{name: "same namespace once defaulted", input: docs(cmIn("prod"), cm), opts: func(o *Options) { o.Namespace = "prod" }, want: ErrDuplicate, msg: []string{"ConfigMap prod/cm"}},
		{name: "two revisions of one original", input: docs(configMap("cm-0123456789", "  annotations: {configmap-attacher.io/name: cm}"), cm), want: ErrDuplicate, msg: []string{"revisions of ConfigMap cm"}},
		{name: "revision name taken", input: docs(cm, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-8338386bc0}\n"), want: ErrDuplicate, msg: []string{"cm-8338386bc0 is already used"}},
		{name: "label unquoted", input: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  labels: {configmap-attacher.io/revisioned: true}\n", want: ErrInvalidObject, msg: []string{"quoted"}},
		{name: "label other value", input: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  labels: {configmap-attacher.io/revisioned: \"yes\"}\n", want: ErrInvalidObject, msg: []string{`"true" or "false"`}},
		{name: "opted-in generateName", input: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: cm-\n  labels: {configmap-attacher.io/revisioned: \"true\"}\n", want: ErrInvalidObject, msg: []string{"metadata.name"}},
		{name: "opted-in invalid name", input: configMap("Not_Valid"), want: ErrInvalidObject, msg: []string{"not a valid name"}},
		{name: "configmap value is a YAML 1.1 boolean", input: strings.Replace(cm, "data: {k: v}", "data: {enabled: yes}", 1), want: ErrInvalidObject, msg: []string{"quote"}},
		{name: "configmap value is a number", input: strings.Replace(cm, "data: {k: v}", "data: {replicas: 3}", 1), want: ErrInvalidObject},
		{name: "secret data not base64", input: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  labels: {configmap-attacher.io/revisioned: \"true\"}\ndata: {k: not base64!}\n", want: ErrInvalidObject, msg: []string{"base64"}},
		{name: "original name annotation not a string", input: configMap("cm", "  annotations: {configmap-attacher.io/name: 5}"), want: ErrInvalidObject},
		{name: "immutable not a bool", input: cm + "immutable: sometimes\n", want: ErrInvalidObject},
		{name: "pod spec does not decode", input: docs(cm, deployment("app", "containers: 5")), want: ErrInvalidObject, msg: []string{"document 2", "Deployment app", "spec.template.spec"}},
		{name: "template not a mapping", input: docs(cm, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app}\nspec: {template: 5}\n"), want: ErrInvalidObject},
		// Renaming would leave a reference behind: refused, naming the document, the field and the fix.
		{name: "opted in across an unknown namespace", input: docs(strings.Replace(cm, "  name: cm\n", "  name: cm\n  namespace: prod\n", 1), deployment("app", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: cm}}]")),
			want: ErrUnreferencedRename, msg: []string{"document 2", "Deployment app", "spec.template.spec.containers[0].envFrom[0].configMapRef.name", "-namespace=prod"}},
		{name: "an Ingress's TLS Secret", input: docs(secretOptedIn("tls"), "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web}\nspec:\n  tls: [{hosts: [a.example], secretName: tls}]\n"),
			want: ErrUnreferencedRename, msg: []string{"document 2", "Ingress web", "spec.tls[0].secretName", "Fix: leave tls out"}},
		{name: "a ServiceAccount's Secret", input: docs(secretOptedIn("token"), "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa}\nsecrets: [{name: token}]\n"),
			want: ErrUnreferencedRename, msg: []string{"ServiceAccount sa", "secrets[0].name"}},
		{name: "not JSON-representable", input: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nspec: {? [a, b] : c}\n", want: ErrInvalidYAML},
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range errorCases() {
		t.Run(tc.name, func(t *testing.T) {
			opts := NewOptions()
			if tc.opts != nil {
				tc.opts(opts)
			}
			var out bytes.Buffer
			err := Run(context.Background(), opts, strings.NewReader(tc.input), &out)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			var de *DocError
			if !errors.As(err, &de) {
				t.Errorf("error %v does not locate the document", err)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not contain %q", err, m)
				}
			}
			if out.Len() != 0 {
				t.Errorf("wrote %d bytes on error", out.Len())
			}
		})
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	cmFile := filepath.Join(dir, "cm.yaml")
	badFile := filepath.Join(dir, "bad.yaml")
	must(os.WriteFile(cmFile, []byte(configMap("cm")), 0o644))
	must(os.WriteFile(badFile, []byte(docs(configMap("other"), "kind: [")), 0o644))
	stdin := deployment("app", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: cm}}]")

	t.Run("files and stdin are one input", func(t *testing.T) {
		opts := NewOptions()
		opts.Files = []string{cmFile, "-"}
		var out bytes.Buffer
		if err := Run(context.Background(), opts, strings.NewReader(stdin), &out); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(out.String(), "cm-8338386bc0"); got != 2 {
			t.Errorf("new name appears %d times, want 2 (object and reference):\n%s", got, out.String())
		}
	})
	t.Run("errors name the file", func(t *testing.T) {
		opts := NewOptions()
		opts.Files = []string{cmFile, badFile}
		var out bytes.Buffer
		err := Run(context.Background(), opts, strings.NewReader(""), &out)
		if !errors.Is(err, ErrInvalidYAML) || !strings.Contains(err.Error(), badFile+": document 2") || out.Len() != 0 {
			t.Errorf("error %v, output %d bytes", err, out.Len())
		}
	})
	t.Run("missing file", func(t *testing.T) {
		opts := NewOptions()
		opts.Files = []string{filepath.Join(dir, "missing.yaml")}
		var out bytes.Buffer
		if err := Run(context.Background(), opts, strings.NewReader(""), &out); !errors.Is(err, os.ErrNotExist) || out.Len() != 0 {
			t.Errorf("error %v", err)
		}
	})
	t.Run("empty input", func(t *testing.T) {
		var out bytes.Buffer
		if err := Run(context.Background(), NewOptions(), strings.NewReader(""), &out); err != nil || out.Len() != 0 {
			t.Errorf("error %v, output %q", err, out.String())
		}
	})
}

func TestWarnings(t *testing.T) {
	uses := func(kind, name string) string {
		return deployment("app", "containers:\n- name: c\n  envFrom: [{"+kind+": {name: "+name+"}}]")
	}
	hook := func(events, workload string) string {
		return strings.Replace(workload, "metadata:\n", "metadata:\n  annotations: {helm.sh/hook: \""+events+"\"}\n", 1)
	}
	tests := []struct {
		name  string
		input string
		opts  func(*Options)
		want  []string // substrings, in order; none means no warning at all
	}{
		{name: "clean", input: docs(configMap("cm"), uses("configMapRef", "cm"))},
		{name: "external reference is not a warning", input: docs(configMap("cm"), uses("configMapRef", "cm"), uses("secretRef", "external"))},
		{name: "selected but absent", input: uses("configMapRef", "cm"), opts: func(o *Options) { must(o.Select.Set("configmap/cm")) },
			want: []string{"not in the input in the workload's namespace", "-select names an object that is not in the input"}},
		{name: "unused", input: configMap("cm"), want: []string{"renamed, but no pod template in the input uses it"}},
		// Helm 4 post-renders hooks: a pre-upgrade hook would wait for a revision Helm creates after it.
		{name: "a pre-upgrade hook reads a renamed revision", input: docs(configMap("cm"),
			hook("pre-install,pre-upgrade", uses("configMapRef", "cm"))), want: []string{"a pre-install hook reads a renamed revision"}},
		{name: "a post-upgrade hook reads it after Helm created it", input: docs(configMap("cm"),
			hook("post-install,post-upgrade", uses("configMapRef", "cm")))},
		{name: "a pre-upgrade hook reads a config that is a hook itself", input: docs(configMap("cm", "  annotations: {helm.sh/hook: pre-upgrade, helm.sh/hook-weight: \"-1\"}"),
			hook("pre-upgrade", uses("configMapRef", "cm")))},
		{name: "selected but labelled false", input: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  labels: {configmap-attacher.io/revisioned: \"false\"}\n", opts: func(o *Options) { must(o.Select.Set("configmap/cm")) },
			want: []string{`labelled \"false\"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := NewOptions()
			if tc.opts != nil {
				tc.opts(opts)
			}
			_, logs := mustRender(t, opts, tc.input)
			if len(tc.want) == 0 && logs != "" {
				t.Errorf("unexpected warnings:\n%s", logs)
			}
			rest := logs
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("no warning %q (in order) in:\n%s", w, logs)
					break
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		select_ []string
		ns      string
		files   []string
		want    string // substring of the error, "" for none
	}{
		{name: "defaults"},
		{name: "good", select_: []string{"configmap/a,cm/b, secret/c.d", "secrets/e"}, ns: "prod", files: []string{"a.yaml", "-"}},
		{name: "bad namespace", ns: "Prod", want: "-namespace"},
		{name: "no slash", select_: []string{"cm-a"}, want: "not kind/name"},
		{name: "empty name", select_: []string{"configmap/"}, want: "not kind/name"},
		{name: "empty entry", select_: []string{"configmap/a,"}, want: "entry 2"},
		{name: "unknown kind", select_: []string{"deployment/a"}, want: "neither configmap nor secret"},
		{name: "invalid name", select_: []string{"secret/A_B"}, want: "not a valid name"},
		{name: "flag after a file", files: []string{"a.yaml", "-namespace=prod"}, want: "put flags before files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.Namespace, o.Files = tc.ns, tc.files
			for _, s := range tc.select_ {
				must(o.Select.Set(s))
			}
			err := o.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestVerifyCatchesUnplannedChanges checks the safety net itself: output that differs from the plan
// is refused.
func TestVerifyCatchesUnplannedChanges(t *testing.T) {
	ds, err := parseStream("stdin", strings.NewReader(configMap("cm")))
	if err != nil {
		t.Fatal(err)
	}
	ds[0].changes = []change{{path: []any{"metadata", "name"}, value: "planned"}}
	must(set(ds[0].top(), []any{"metadata", "name"}, "something-else"))
	var buf bytes.Buffer
	must(ds[0].encode(&buf))
	if err := verify(buf.Bytes(), ds); !errors.Is(err, ErrUnsafe) {
		t.Errorf("verify = %v, want ErrUnsafe", err)
	}
	ds[0].changes = nil
	if err := verify(append(buf.Bytes(), "---\nkind: Extra\n"...), ds); !errors.Is(err, ErrUnsafe) {
		t.Errorf("verify with an extra document = %v, want ErrUnsafe", err)
	}
}
