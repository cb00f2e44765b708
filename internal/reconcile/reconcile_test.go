package reconcile

import (
	"errors"
	"testing"
)

func TestSplitKey(t *testing.T) {
	tests := []struct {
		key, kind, ns, name string
		bad                 bool
	}{
		{key: "ReplicaSet/prod/web-5d8f", kind: "ReplicaSet", ns: "prod", name: "web-5d8f"},
		{key: "ConfigMap/prod/a/b", kind: "ConfigMap", ns: "prod", name: "a/b"}, // the rest is the name
		{key: "Namespace//prod", kind: "Namespace", ns: "", name: "prod"},       // cluster-scoped
		{key: "ReplicaSet/prod", bad: true},
		{key: "/prod/web", bad: true},
		{key: "ReplicaSet/prod/", bad: true},
	}
	for _, tt := range tests {
		kind, ns, name, err := SplitKey(tt.key)
		if tt.bad {
			if !errors.Is(err, ErrPermanent) {
				t.Errorf("SplitKey(%q) err = %v, want a permanent error", tt.key, err)
			}
			continue
		}
		if err != nil || kind != tt.kind || ns != tt.ns || name != tt.name {
			t.Errorf("SplitKey(%q) = %q, %q, %q, %v", tt.key, kind, ns, name, err)
		}
	}
}
