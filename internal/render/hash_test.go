package render

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// hashOf renders a single opted-in object and returns the hash part of its new name.
func hashOf(t *testing.T, doc string) string {
	t.Helper()
	opts := NewOptions()
	opts.AllConfigMaps, opts.AllSecrets = true, true
	res, _ := mustRender(t, opts, doc)
	if len(res.renames) != 1 {
		t.Fatalf("renames %v", res.renames)
	}
	to := res.renames[0].To
	return to[len(to)-content.HashLength:]
}

func TestContentHash(t *testing.T) {
	cm := func(body string) string { return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n" + body }
	secret := func(body string) string { return "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n" + body }
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"key order", cm("data:\n  a: \"1\"\n  b: \"2\"\n"), cm("data:\n  b: \"2\"\n  a: \"1\"\n"), true},
		{"YAML style", cm("data:\n  a: |-\n    x\n  b: '2'\n"), cm("data: {\"a\": \"x\", b: \"2\"}\n"), true},
		{"field order and metadata", cm("data: {a: x}\nbinaryData: {b: eQ==}\n"), "kind: ConfigMap\nbinaryData: {b: eQ==}\napiVersion: v1\nmetadata: {name: x, labels: {l: v}, annotations: {a: b}}\ndata: {a: x}\n", true},
		{"empty data is no data", cm("data: {}\n"), cm(""), true},
		{"null value is empty", cm("data: {a: ~}\n"), cm("data: {a: \"\"}\n"), true},
		{"immutable is not content", cm("data: {a: x}\nimmutable: true\n"), cm("data: {a: x}\n"), true},
		{"value", cm("data: {a: x}\n"), cm("data: {a: z}\n"), false},
		{"key", cm("data: {a: x}\n"), cm("data: {b: x}\n"), false},
		{"trailing newline", cm("data:\n  a: |\n    x\n"), cm("data:\n  a: |-\n    x\n"), false},
		{"data vs binaryData", cm("data: {a: x}\n"), cm("binaryData: {a: eA==}\n"), false},
		{"secret stringData vs data", secret("stringData: {user: admin}\n"), secret("data: {user: YWRtaW4=}\n"), true},
		{"secret stringData wins over data", secret("data: {user: b2xk}\nstringData: {user: admin}\n"), secret("data: {user: YWRtaW4=}\n"), true},
		{"secret stringData merged with data", secret("data: {a: eA==}\nstringData: {b: z}\n"), secret("stringData: {a: x, b: z}\n"), true},
		{"secret default type", secret("data: {a: eA==}\n"), secret("type: Opaque\ndata: {a: eA==}\n"), true},
		{"secret type", secret("type: Opaque\ndata: {a: eA==}\n"), secret("type: example.com/other\ndata: {a: eA==}\n"), false},
		{"secret data", secret("data: {a: eA==}\n"), secret("data: {a: eQ==}\n"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := hashOf(t, tc.a), hashOf(t, tc.b)
			if (a == b) != tc.same {
				t.Errorf("hashes %s and %s: same = %v, want %v", a, b, a == b, tc.same)
			}
		})
	}
}

// TestContentHashIsPinned fixes the scheme: changing it renames every revisioned object of every
// user on their next deploy, so it must be a deliberate, documented change. The values are
// reproducible with a shell: printf '{"data":{"a":"1"}}' | sha256sum | cut -c1-10
func TestContentHashIsPinned(t *testing.T) {
	tests := []struct {
		kind refs.Kind
		raw  string
		want string
	}{
		{refs.ConfigMap, `{"data":{"a":"1"}}`, "3218bc4f76"},                 // sha256 of {"data":{"a":"1"}}
		{refs.Secret, `{"stringData":{"a":"1"}}`, "a5d27d8008"},              // sha256 of {"type":"Opaque","data":{"a":"MQ=="}}
		{refs.Secret, `{"type":"Opaque","data":{"a":"MQ=="}}`, "a5d27d8008"}, // the same Secret
		// encoding/json escapes <, > and & as \u003c, \u003e, \u0026, as Sprig's toJson does: the
		// base-app chart names ConfigMaps with `toJson | sha256sum | trunc 10` and must agree.
		{refs.ConfigMap, `{"data":{"a":"<b & c>"}}`, "2c6ab34699"},
	}
	for _, tc := range tests {
		got, err := contentHash(tc.kind, []byte(tc.raw))
		if err != nil || got != tc.want {
			t.Errorf("contentHash(%s, %s) = %q, %v; want %q", tc.kind, tc.raw, got, err, tc.want)
		}
	}
}

func TestRevisionName(t *testing.T) {
	const hash = "0123456789"
	long := strings.Repeat("a", 300)
	tests := []struct {
		name, base, want string
	}{
		{"short", "app", "app-" + hash},
		{"fits exactly", strings.Repeat("b", 242), strings.Repeat("b", 242) + "-" + hash},
		{"one too long", strings.Repeat("b", 243), strings.Repeat("b", 242) + "-" + hash},
		{"very long", long, long[:242] + "-" + hash},
		{"cut before a dash", strings.Repeat("c", 241) + "-d" + "eeee", strings.Repeat("c", 241) + "-" + hash},
		{"cut before dots and dashes", strings.Repeat("c", 239) + "x.-.yyy", strings.Repeat("c", 239) + "x-" + hash},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := content.Name(tc.base, hash)
			if got != tc.want {
				t.Errorf("revisionName = %q (%d), want %q", got, len(got), tc.want)
			}
			if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 && validation.IsDNS1123Subdomain(tc.base) == nil {
				t.Errorf("%q is not a valid name: %v", got, msgs)
			}
			if !content.IsRevisionOf(got, tc.base) {
				t.Errorf("content.IsRevisionOf(%q, %q) = false", got, tc.base)
			}
		})
	}
	for _, name := range []string{"app", "app-", "app-012345678", "app-0123456789a", "app-012345678G", "app-ABCDEF0123", "other-0123456789"} {
		if content.IsRevisionOf(name, "app") {
			t.Errorf("content.IsRevisionOf(%q, app) = true", name)
		}
	}
}

func TestLongNames(t *testing.T) {
	base := strings.Repeat("long-name.", 25) + "abc" // 253 characters, the longest valid name
	res, _ := mustRender(t, nil, docs(configMap(base), deployment("app", "containers:\n- name: c\n  envFrom: [{configMapRef: {name: "+base+"}}]")))
	to := res.renames[0].To
	if len(to) > 253 || len(validation.IsDNS1123Subdomain(to)) > 0 || !strings.HasSuffix(to, "-8338386bc0") {
		t.Errorf("new name %q (%d) is not a valid revision name", to, len(to))
	}
	if len(res.rewrites) != 1 || res.rewrites[0].To != to {
		t.Errorf("rewrites %v", res.rewrites)
	}
	again, _ := mustRender(t, nil, string(res.out))
	if len(again.renames) != 0 || string(again.out) != string(res.out) {
		t.Errorf("re-render renamed %v", again.renames)
	}
}
