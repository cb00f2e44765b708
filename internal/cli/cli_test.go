package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runMain(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(context.Background(), Env{
		Args: args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
		Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	return code, out.String(), errOut.String()
}

// helm4Plugin is the environment Helm 4 gives its plugin, in a directory whose plugin.yaml has version v.
func helm4Plugin(t *testing.T, v string) map[string]string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte("name: configmap-attacher\nversion: "+v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"HELM_PLUGIN_NAME": "configmap-attacher", "HELM_PLUGIN_DIR": dir}
}

func TestExitCodesAndUsage(t *testing.T) {
	noCluster := map[string]string{"IS_IN_CLUSTER": "false", "KUBECONFIG": "/nonexistent"}
	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		code       int
		stdout     string
		stderrLine string
	}{
		{"no arguments prints the commands", nil, nil, ExitUsage, "", "Commands:"},
		{"help", nil, []string{"help"}, ExitOK, "Commands:", ""},
		{"job -h shows an example", nil, []string{"-h"}, ExitOK, "configmap-attacher -rollout demo -namespace devops-apps-01", ""},
		{"each command has -h", nil, []string{"controller", "-h"}, ExitOK, "Usage:", ""},
		{"unknown command", nil, []string{"attatch"}, ExitUsage, "", `unknown command "attatch"`},
		{"unknown flag", nil, []string{"-rollouts", "demo"}, ExitUsage, "", "flag provided but not defined: -rollouts"},
		{"invalid flags are one line", nil, []string{"-rollout", "demo"}, ExitUsage, "", "-namespace is required; nothing to attach"},
		{"stray argument", nil, []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", "a", "b"}, ExitUsage, "", `unexpected argument "b"`},
		{"unknown LOG_LEVEL", map[string]string{"LOG_LEVEL": "verbose"}, []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", "a"}, ExitUsage, "", `LOG_LEVEL "verbose" is not one of`},
		{"unknown LOG_FORMAT", map[string]string{"LOG_FORMAT": "yaml"}, []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", "a"}, ExitUsage, "", `LOG_FORMAT "yaml" is not json or text`},
		{"empty -namespaces is not all namespaces", nil, []string{"controller", "-namespaces="}, ExitUsage, "", "-namespaces is empty"},
		{"bad IS_IN_CLUSTER", map[string]string{"IS_IN_CLUSTER": "maybe"}, []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", "a"}, ExitUsage, "", `IS_IN_CLUSTER="maybe" is not a boolean`},
		{"no kubeconfig is a failure, not usage", noCluster, []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", "a"}, ExitFailure, "", "loading kubeconfig"},
		{"controller validates flags", nil, []string{"controller", "-workers", "0"}, ExitUsage, "", "-workers must be at least 1"},
		{"a negative -held-resync is refused", nil, []string{"controller", "-held-resync=-1m"}, ExitUsage, "", "-held-resync -1m0s is negative"},
		{"-memory-limit-ratio is a share", nil, []string{"controller", "-memory-limit-ratio=1.5"}, ExitUsage, "", "-memory-limit-ratio 1.5 is not a share: give a number from 0 (no soft limit) to 1, e.g. 0.8"},
		{"a negative -start-gc-percent is refused", nil, []string{"controller", "-start-gc-percent=-5"}, ExitUsage, "", "-start-gc-percent -5 is negative: give a GC target such as 50, or 0 to keep -gc-percent's throughout"},
		{"a negative -gc-percent is refused", nil, []string{"controller", "-gc-percent=-1"}, ExitUsage, "", "-gc-percent -1 is negative: give a GC target such as 50, or 0 for Go's default (100)"},
		{"profiling needs the metrics address", nil, []string{"controller", "-profiling", "-metrics-bind-address="}, ExitUsage, "", "-profiling serves on the metrics address: set -metrics-bind-address"},
		{"version", nil, []string{"version"}, ExitOK, "devel", ""},
		// Run by Helm 4 as the post-renderer plugin (deploy/helm-plugin).
		{"plugin: render", helm4Plugin(t, "0.0.0-devel"), []string{"render"}, ExitOK, "", ""},
		{"plugin: the install hook", helm4Plugin(t, "0.0.0-devel"), []string{"version"}, ExitOK, "devel", ""},
		{"plugin of another version", helm4Plugin(t, "0.1.0"), []string{"render"}, ExitFailure, "", "is version 0.1.0 but its binary is 0.0.0-devel"},
		{"plugin without render", helm4Plugin(t, "0.0.0-devel"), []string{"-namespace=prod"}, ExitUsage, "", `first argument must be render (--post-renderer configmap-attacher --post-renderer-args render ...), got "-namespace=prod"`},
		{"plugin without arguments", helm4Plugin(t, "0.0.0-devel"), nil, ExitUsage, "", "first argument must be render"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runMain(tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout, tt.stdout)
			}
			if !strings.Contains(stderr, tt.stderrLine) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.stderrLine)
			}
		})
	}
}
