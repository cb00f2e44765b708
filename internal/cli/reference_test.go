package cli

import (
	"slices"
	"strings"
	"testing"
)

// Reference must list every command with the flags -h shows, read without touching a cluster.
func TestReferenceListsEveryCommandsFlags(t *testing.T) {
	refs, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string][]string{}
	for _, r := range refs {
		for _, f := range r.Flags {
			flags[r.Name] = append(flags[r.Name], f.Name)
		}
	}
	for cmd, want := range map[string][]string{
		"attach":     {"rollout", "deployment", "namespace", "configmaps", "secrets", "timeout"},
		"controller": {"leader-election-renew-deadline", "pinning", "pinning-admission", "reloader-annotations", "namespaces"},
		"render":     {"namespace", "select", "all-configmaps", "chart"},
		"adopt":      {"namespace", "n", "dry-run"},
		"release":    {"A", "n", "delete-webhook-configuration", "delete-admission-policy", "stop-controller"},
		"history":    {"o", "output", "n"},
		"diff":       {"show-secrets"},
	} {
		for _, name := range want {
			if !slices.Contains(flags[cmd], name) {
				t.Errorf("%s: no flag -%s in %v", cmd, name, flags[cmd])
			}
		}
	}
	for _, r := range refs {
		if r.Name != "version" && !strings.Contains(r.Synopsis, "Usage:") {
			t.Errorf("%s: synopsis without its usage line: %q", r.Name, r.Synopsis)
		}
	}
}
