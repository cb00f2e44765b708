package content

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Known answers: every revision name, every snapshot name and the config trigger's config-hash rest
// on this hash, so it must not drift across releases. Each digest below was computed by hand, not by
// this package: the canonical JSON written out as a byte string and hashed with coreutils, e.g.
//
//	printf '%s' '{"data":{"a":"1","b":"2"}}' | sha256sum | cut -c1-10
//
// The canonical form: a ConfigMap is {"data":{...},"binaryData":{...}} (each left out when empty), a
// Secret {"type":"<type, Opaque by default>","data":{...}}; keys sorted, bytes base64 (standard,
// padded), < > & escaped as \u003c \u003e \u0026 (encoding/json's, which Helm's toJson shares).
func TestKnownAnswers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		obj       runtime.Object
		keys      []string // OfKeys; nil: Of
		canonical string   // what was hashed by hand
		want      string
	}{
		{"a ConfigMap", &corev1.ConfigMap{Data: map[string]string{"b": "2", "a": "1"}}, nil,
			`{"data":{"a":"1","b":"2"}}`, "99dd3611a4"},
		{"binary data and HTML escaping", &corev1.ConfigMap{Data: map[string]string{"x": "<&>"}, BinaryData: map[string][]byte{"bin": {0x00, 0xff}}}, nil,
			`{"data":{"x":"\u003c\u0026\u003e"},"binaryData":{"bin":"AP8="}}`, "d773db92ad"},
		{"an empty ConfigMap", &corev1.ConfigMap{}, nil, `{}`, "44136fa355"},
		{"a Secret, its type defaulted", &corev1.Secret{Data: map[string][]byte{"password": []byte("hunter2")}}, nil,
			`{"type":"Opaque","data":{"password":"aHVudGVyMg=="}}`, "c064741aae"},
		{"a TLS Secret", &corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")}}, nil,
			`{"type":"kubernetes.io/tls","data":{"tls.crt":"Y2VydA==","tls.key":"a2V5"}}`, "7727aa5c87"},
		{"a null value hashes as empty", &corev1.Secret{Data: map[string][]byte{"k": nil}}, nil,
			`{"type":"Opaque","data":{"k":""}}`, "9329025d9d"},
		{"one key of a ConfigMap, a missing key left out", &corev1.ConfigMap{Data: map[string]string{"a": "1", "b": "2", "c": "3"}}, []string{"a", "missing"},
			`{"data":{"a":"1"}}`, "3218bc4f76"},
		{"one key of a Secret", &corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")}}, []string{"tls.crt"},
			`{"type":"kubernetes.io/tls","data":{"tls.crt":"Y2VydA=="}}`, "75a504cdc4"},
		{"every key named: the whole object's hash", &corev1.ConfigMap{Data: map[string]string{"a": "1", "b": "2"}}, []string{"b", "a"},
			`{"data":{"a":"1","b":"2"}}`, "99dd3611a4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OfKeys(tc.obj, tc.keys)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hash %s, want %s (sha256 of %s)", got, tc.want, tc.canonical)
			}
		})
	}
}

// The trigger's config-hash is HashJSON of {"<Kind>/<name>[<keys>]": "<content hash>", ...}.
func TestHashJSONKnownAnswer(t *testing.T) {
	got, err := HashJSON(map[string]string{"Secret/tls[tls.crt]": "75a504cdc4", "ConfigMap/app-config": "99dd3611a4"})
	if err != nil {
		t.Fatal(err)
	}
	// printf '%s' '{"ConfigMap/app-config":"99dd3611a4","Secret/tls[tls.crt]":"75a504cdc4"}' | sha256sum
	if want := "f7cf185398"; got != want {
		t.Errorf("HashJSON %s, want %s", got, want)
	}
}

// A revisioned name carries the hash; HashOfName reads it back.
func TestNameAndHashOfName(t *testing.T) {
	if got := Name("app-config", "99dd3611a4"); got != "app-config-99dd3611a4" {
		t.Errorf("Name %q", got)
	}
	if h, ok := HashOfName("app-config-99dd3611a4", "app-config"); !ok || h != "99dd3611a4" {
		t.Errorf("HashOfName %q %v", h, ok)
	}
	if _, ok := HashOfName("app-config-99dd3611aZ", "app-config"); ok {
		t.Error("a suffix that is no hex hash was read as one")
	}
}
