package doccheck

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/cli"
)

// commands stand for the binary's flag sets.
var commands = []cli.CommandReference{
	{Name: "attach", Summary: "attach once", Synopsis: "Attach.\n\nUsage:\n  configmap-attacher -rollout NAME\n", Flags: []cli.FlagReference{
		{Name: "rollout", Arg: "string"}, {Name: "namespace", Arg: "string"}, {Name: "configmaps", Arg: "string"}}},
	{Name: "controller", Summary: "keep attaching", Flags: []cli.FlagReference{
		{Name: "leader-election-renew-deadline", Arg: "duration", Default: "10s"}, {Name: "pinning"}}},
	{Name: "render", Summary: "rename", Flags: []cli.FlagReference{{Name: "namespace", Arg: "string"}, {Name: "select", Arg: "string"}}},
	{Name: "release", Summary: "release", Flags: []cli.FlagReference{{Name: "A"}, {Name: "delete-admission-policy", Arg: "string"}}},
	{Name: "version", Summary: "print the version"},
}

const chartSchema = `{
  "type": "object", "additionalProperties": false,
  "definitions": {"dur": {"type": "string"}},
  "properties": {
    "pinning": {"type": "object", "additionalProperties": false, "properties": {
      "enabled": {"type": "boolean"}, "failurePolicy": {"enum": ["Fail", "Ignore"]},
      "networkPolicy": {"type": "object", "properties": {"apiServerCIDRs": {"type": "array", "items": {"type": "string"}}}}}},
    "reloaderAnnotations": {"type": "boolean"},
    "leaderElection": {"type": "object", "additionalProperties": false, "properties": {"renewDeadline": {"$ref": "#/definitions/dur"}}},
    "podLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    "resources": {"type": "object"},
    "watchNamespaces": {"type": "array", "items": {"type": "string"}}
  }
}`

// repo writes a repository holding files, the generated reference current unless files has one.
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	all := map[string]string{
		"charts/app/values.schema.json": chartSchema,
		ReferencePath:                   Reference(commands),
	}
	for k, v := range files {
		all[k] = v
	}
	for name, text := range all {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string // substrings of the problems, in order; none: the docs pass
	}{
		{
			name: "links and anchors that resolve",
			files: map[string]string{
				"README.md":          "# T\n\nSee [ops](docs/operations.md#removing-it-per-mode), [a dir](charts/app), [here](#t), [web](https://example.com/x#y), `[not](a-link.md)`.\n",
				"docs/operations.md": "# Ops\n\n## Removing it, per mode\n\n## Removing it, per mode\n\n[twice](#removing-it-per-mode-1) [`code` heading](#code-and-135-words)\n\n### `code` and 1.35+ words\n",
			},
		},
		{
			name: "a missing file, a missing anchor, a link out of the repository",
			files: map[string]string{
				"README.md": "[a](docs/nope.md) [b](docs/x.md#nope) [c](../outside.md)\n",
				"docs/x.md": "# X\n",
			},
			want: []string{`link "docs/nope.md": docs/nope.md does not exist`, `docs/x.md has no heading with the anchor #nope`, `leaves the repository`},
		},
		{
			name:  "links inside fenced code are not links",
			files: map[string]string{"docs/a.md": "# A\n\n```md\n[x](missing.md)\n```\n"},
		},
		{
			name: "flags that exist, alone and in command lines",
			files: map[string]string{"docs/a.md": "# A\n\n`-leader-election-renew-deadline` `-pinning` `-namespace NS` `-A`\n\n" +
				"```sh\nconfigmap-attacher -rollout demo -namespace ns -configmaps a \\\n  -h\n" +
				"kubectl get cm -o yaml | configmap-attacher render -select configmap/x --namespace=prod\n" +
				"helm install configmap-attacher charts/app -n kube-system --timeout 10m\n" +
				"helm upgrade app ./c --post-renderer configmap-attacher --post-renderer-args render --post-renderer-args=-namespace=prod\n```\n"},
		},
		{
			name: "a flag no command has, alone and in a command line",
			files: map[string]string{"docs/a.md": "# A\n\n| `-leader-election-lease-duration` / `-renew-deadline` | 10s |\n\n" +
				"`configmap-attacher release -A -delete-webhook-configuration x`\n\n" +
				"```sh\n$ configmap-attacher controller -pinning -renew-deadline=5s\n" +
				"helm upgrade app ./c --post-renderer configmap-attacher --post-renderer-args=-all-configmaps\n```\n"},
			want: []string{"has a flag -leader-election-lease-duration", "has a flag -renew-deadline", "release has no flag -delete-webhook-configuration",
				"controller has no flag -renew-deadline", "render has no flag -all-configmaps"},
		},
		{
			name: "chart values that exist",
			files: map[string]string{"docs/a.md": "# A\n\n`pinning.failurePolicy=Ignore` `reloaderAnnotations=true` `podLabels.team=x` `resources.limits.memory` `metadata.namespace` `team=payments`\n\n" +
				"```sh\nhelm install x charts/app --set pinning.enabled=true,reloaderAnnotations=true --set 'watchNamespaces={a,b}' \\\n" +
				"  --set-json 'pinning.networkPolicy.apiServerCIDRs=[\"10.0.0.0/8\"]' --set watchNamespaces[0]=a\n```\n"},
		},
		{
			name: "chart values that do not",
			files: map[string]string{"docs/a.md": "# A\n\n`pinning.failurePolcy=Ignore` `leaderElection.renewDeadline.x`\n\n" +
				"```sh\nhelm install x charts/app --set pinning.enabled=true,reloaderAnnotation=true\n```\n"},
			want: []string{"pinning.failurePolcy exists in no chart", "leaderElection.renewDeadline.x exists in no chart", "reloaderAnnotation exists in no chart"},
		},
		{
			name:  "history prose",
			files: map[string]string{"docs/a.md": "# A\n\nMeasured on 1d22214 (the thirteenth run), fixed in issue 37; CI passed run 5.\n"},
			want:  []string{`"1d22214" looks like a commit`, `"issue 37"`, `"run 5"`, `"thirteenth run"`},
		},
		{
			name:  "hashes that are not commits, counts that are not runs",
			files: map[string]string{"docs/a.md": "# A\n\n`app-config-5d8f9c7b6a`, sha256 3f2a1b0c, `99dd3611a4`, sha256:1df1a0fffe71e10c63fe750899af773dfc2db090e1bd6055e315fabcf062e3d5, v0.0.0-20260914071520-c9c369efcc5b; it runs 2 replicas.\n"},
		},
		{
			name:  "raw benchmark outputs may name their commit",
			files: map[string]string{"docs/benchmarks/scale.md": "commit 1d22214, 2026-11-28\n"},
		},
		{
			name:  "a README longer than a screen",
			files: map[string]string{"README.md": "# T\n" + strings.Repeat("line\n", ReadmeMaxLines)},
			want:  []string{"README.md has 121 lines"},
		},
		{
			name: "every alert's runbook has its heading in the operator's manual",
			files: map[string]string{
				"docs/operations.md": "# Ops\n\n### ConfigMapAttacherNoLeader\n",
				"charts/app/templates/rules.yaml": "    - alert: ConfigMapAttacherNoLeader\n      annotations:\n        runbook_url: {{ $runbook }}#configmapattachernoleader\n" +
					"    - alert: ConfigMapAttacherNew\n      annotations:\n        runbook_url: {{ $runbook }}#configmapattachernew\n",
			},
			want: []string{"charts/app/templates/rules.yaml:6: runbook #configmapattachernew: docs/operations.md has no heading"},
		},
		{
			name:  "a stale reference",
			files: map[string]string{ReferencePath: "# old\n"},
			want:  []string{"docs/reference.md:1: stale"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := Check(Inputs{Root: repo(t, tc.files), Commands: commands})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range problems {
				got = append(got, p.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d: %q does not say %q", i, got[i], w)
				}
			}
		})
	}
}

func TestChartREADMEsAreCompared(t *testing.T) {
	root := repo(t, map[string]string{"charts/app/Chart.yaml": "name: app\n", "charts/app/README.md": "old\n"})
	gen := func(dir string) (string, error) { return "new\n", nil }
	problems, err := Check(Inputs{Root: root, Commands: commands, ChartREADMEs: gen})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0].String(), "charts/app/README.md:1: stale") {
		t.Fatalf("want the chart README reported stale, got %v", problems)
	}
	if err := os.WriteFile(filepath.Join(root, "charts/app/README.md"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if problems, err := Check(Inputs{Root: root, Commands: commands, ChartREADMEs: gen}); err != nil || len(problems) != 0 {
		t.Fatalf("a current README: got %v, %v", problems, err)
	}
	if err := os.Remove(filepath.Join(root, "charts/app/README.md")); err != nil {
		t.Fatal(err)
	}
	problems, err = Check(Inputs{Root: root, Commands: commands, ChartREADMEs: gen})
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0].String(), "charts/app/README.md:1: missing") {
		t.Fatalf("a missing README: got %v, %v", problems, err)
	}
	withUndescribed := func(string) (string, error) {
		return "# app\n\n| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n| a.b | string | `\"\"` | Described. |\n| c | int | `1` |  |\n", nil
	}
	problems, err = Check(Inputs{Root: root, Commands: commands, ChartREADMEs: withUndescribed})
	if err != nil || len(problems) != 2 || !strings.Contains(problems[1].String(), "charts/app/values.yaml:1: value c has no description") {
		t.Fatalf("a value without a description: got %v, %v", problems, err)
	}
	undocumented := func(string) (string, error) {
		return "", errors.New("values without documentation: releaseOnUninstall")
	}
	problems, err = Check(Inputs{Root: root, Commands: commands, ChartREADMEs: undocumented})
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0].String(), "charts/app/values.yaml:1: its README cannot be generated: values without documentation: releaseOnUninstall") {
		t.Fatalf("an undocumented value: got %v, %v", problems, err)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Admission policy mode (Kubernetes 1.36+)":                                 "admission-policy-mode-kubernetes-136",
		"Scale: one cluster grown to 150,000 Pods, beside kube-controller-manager": "scale-one-cluster-grown-to-150000-pods-beside-kube-controller-manager",
		"Moving an existing release to `render`: `adopt`":                          "moving-an-existing-release-to-render-adopt",
		"Recipe 1: base-app with [the controller](x.md)":                           "recipe-1-base-app-with-the-controller",
		"A real node (`realnode.sh`)":                                              "a-real-node-realnodesh",
		"ConfigMapAttacherWebhookFailingOpen":                                      "configmapattacherwebhookfailingopen",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
