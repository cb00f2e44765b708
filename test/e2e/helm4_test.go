//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/configmap-attacher/configmap-attacher/internal/helmplugin"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// What Helm 4 does with the shipped post-renderer plugin (deploy/helm-plugin, installed by TestMain as
// make helm-plugin's directory, `helm plugin install <directory>`; the signed package's install is
// TestRealNodeInstallsASignedReleaseFromARegistry's), beyond the install and upgrade stories: output,
// errors, bad input, hooks.

// revisionName is a name render gives: <name>-<10 hex digits>.
func revisionName(name string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `-[0-9a-f]{10}$`)
}

// configReads lists the ConfigMaps and Secrets an object's pod templates read, as Kind/name, by the
// reference table render and the controller use.
func configReads(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	raw, err := o.MarshalJSON()
	must(t, err)
	uses, err := refs.ManifestUses(o.GetAPIVersion(), o.GetKind(), raw)
	must(t, err)
	var out []string
	for _, u := range uses {
		if !u.Outside {
			out = append(out, u.Ref.String())
		}
	}
	return out
}

// grafanaTemplate is `helm template` of the public grafana chart through the post-renderer.
func grafanaTemplate(ns string, extra ...string) []string {
	args := []string{"template", "graf", testdataPath("charts/grafana"), "-n", ns, "-f", testdataPath("grafana-values.yaml")}
	return append(args, postRenderer(ns, append([]string{"-select=configmap/graf-grafana,secret/graf-grafana,secret/graf-grafana-env",
		"-chart=" + testdataPath("charts/grafana"), "-allow-lookup=secret/graf-grafana"}, extra...)...)...)
}

// `helm template` with the installed plugin renders a chart nobody here wrote with revisioned names, the
// same bytes every time, and the same bytes with the Helm Argo CD ships (an older Helm 4).
func TestHelm4PluginRendersAPublicChartReproducibly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := helmCLI(t)
	first, stderr, err := h.RunOutput(ctx, grafanaTemplate("monitoring")...)
	must(t, err)
	if stderr != "" {
		t.Errorf("helm template wrote to stderr:\n%s", stderr)
	}
	objs, err := framework.ParseManifests(first)
	must(t, err)
	var deployment *unstructured.Unstructured
	revisions := map[string]string{} // Kind/name -> revision name
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == "graf-grafana" {
			deployment = o
		}
		if base := o.GetAnnotations()["configmap-attacher.io/name"]; base != "" {
			if !revisionName(base).MatchString(o.GetName()) {
				t.Errorf("%s %s: want the revision name %s-<hash>", o.GetKind(), o.GetName(), base)
			}
			revisions[o.GetKind()+"/"+base] = o.GetName()
		}
		if _, ok := o.GetAnnotations()["postrenderer.helm.sh/postrender-filename"]; ok {
			t.Errorf("%s %s keeps Helm 4's post-renderer annotation", o.GetKind(), o.GetName())
		}
	}
	if len(revisions) != 3 || deployment == nil {
		t.Fatalf("want 3 revisioned objects (ConfigMap graf-grafana, Secrets graf-grafana and graf-grafana-env) and the Deployment, got %v", revisions)
	}
	reads := configReads(t, deployment)
	for kindName, rev := range revisions {
		kind, _, _ := strings.Cut(kindName, "/")
		if !slices.Contains(reads, kind+"/"+rev) {
			t.Errorf("the Deployment reads %v, not the revision %s/%s", reads, kind, rev)
		}
	}
	t.Logf("then: Helm 4 with the plugin renders %v, and the Deployment reads them", revisions)

	second, _, err := h.RunOutput(ctx, grafanaTemplate("monitoring")...)
	must(t, err)
	if first != second {
		t.Fatal("a second helm template of the same input differs")
	}
	t.Logf("then: a second render is byte-identical (%d bytes)", len(first))

	argo := h
	argo.Path = argoCDHelm(t)
	third, _, err := argo.RunOutput(ctx, grafanaTemplate("monitoring")...)
	must(t, err)
	if first != third {
		t.Fatalf("the Helm Argo CD ships renders otherwise:\n%s", third)
	}
	v, err := argo.Run(ctx, "version", "--short")
	must(t, err)
	t.Logf("then: %s (the Helm Argo CD ships) renders the same bytes", strings.TrimSpace(v))
}

// Bad input through Helm 4: a one-line reason on Helm's stderr, no manifest on stdout, non-zero exit.
// Helm 4 itself shows only `plugin "configmap-attacher" exited with error` (it discards a plugin's
// stderr), so each reason must come from the binary writing to Helm's stderr.
func TestHelm4PluginRefusesBadInputInOneLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := "monitoring"
	expectRefusal := func(t *testing.T, h framework.Helm, want string, args ...string) {
		t.Helper()
		stdout, stderr, err := h.RunOutput(ctx, args...)
		if err == nil || strings.TrimSpace(stdout) != "" {
			t.Fatalf("want a failure and nothing on stdout; err %v, stdout:\n%s", err, stdout)
		}
		var line string
		for l := range strings.Lines(stderr) {
			if strings.Contains(l, want) {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("stderr has no line with %q:\n%s", want, stderr)
		}
		t.Logf("then: %s", strings.TrimSpace(line))
	}

	t.Run("render refuses: a lookup Secret, read from Helm 4's template annotation", func(t *testing.T) {
		// No adminPassword: the chart reads the generated one back with lookup.
		args := []string{"template", "graf", testdataPath("charts/grafana"), "-n", ns}
		args = append(args, postRenderer(ns, "-select=secret/graf-grafana", "-chart="+testdataPath("charts/grafana"))...)
		expectRefusal(t, helmCLI(t), "Secret monitoring/graf-grafana: the chart looks it up by name: its template grafana/templates/secret.yaml calls lookup of Secrets", args...)
	})

	t.Run("render refuses: a lookup in a subchart packaged by Helm 4", func(t *testing.T) {
		h := helmCLI(t)
		parent := filepath.Join(t.TempDir(), "parent")
		must(t, os.MkdirAll(filepath.Join(parent, "charts"), 0o755))
		must(t, os.WriteFile(filepath.Join(parent, "Chart.yaml"), []byte("apiVersion: v2\nname: parent\nversion: 1.0.0\n"), 0o644))
		_, err := h.Run(ctx, "package", testdataPath("charts/grafana"), "-d", filepath.Join(parent, "charts"))
		must(t, err)
		args := []string{"template", "graf", parent, "-n", ns}
		args = append(args, postRenderer(ns, "-select=secret/graf-grafana", "-chart="+parent)...)
		expectRefusal(t, h, "its template parent/charts/grafana/templates/secret.yaml calls lookup of Secrets", args...)
	})

	t.Run("render forgotten", func(t *testing.T) {
		args := []string{"template", "graf", testdataPath("charts/grafana"), "-n", ns, "--post-renderer", "configmap-attacher", "--post-renderer-args=-namespace=" + ns}
		expectRefusal(t, helmCLI(t), `configmap-attacher: as a Helm post-renderer its first argument must be render (--post-renderer configmap-attacher --post-renderer-args render ...), got "-namespace=monitoring"`, args...)
	})

	t.Run("a binary of another version than the plugin", func(t *testing.T) {
		plugins := t.TempDir()
		dir := filepath.Join(plugins, "configmap-attacher")
		must(t, os.MkdirAll(dir, 0o755))
		yml, err := os.ReadFile(filepath.Join(e2e.helmPlugins, "configmap-attacher", "plugin.yaml"))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), yml, 0o644))
		build := exec.CommandContext(ctx, "go", "build", "-ldflags", "-X github.com/configmap-attacher/configmap-attacher/internal/version.stamped=v9.9.9",
			"-o", filepath.Join(dir, "configmap-attacher"), "./cmd/configmap-attacher")
		build.Dir = e2e.root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		h := helmCLI(t)
		h.Env = []string{"HELM_PLUGINS=" + plugins}
		expectRefusal(t, h, "but its binary is 9.9.9: install the plugin and its binary from one package", grafanaTemplate(ns)...)
	})

	t.Run("the plugin installed without its binary", func(t *testing.T) {
		h := helmCLI(t)
		h.Env = nil // its own plugins directory, in its Helm home
		_, stderr, err := h.RunOutput(ctx, "plugin", "install", rootPath("deploy/helm-plugin"))
		if err == nil || !strings.Contains(stderr, "configmap-attacher: no such file or directory") {
			t.Fatalf("installing the source directory: want the install hook refused for the missing binary; err %v, stderr:\n%s", err, stderr)
		}
		t.Logf("then: helm plugin install: %s", strings.TrimSpace(stderr))
		expectRefusal(t, h, "configmap-attacher: no such file or directory", grafanaTemplate(ns)...)
	})

	t.Run("Helm 3 and the plugin package", func(t *testing.T) {
		pkg, err := helmplugin.Pack(ctx, rootPath("deploy/helm-plugin"), e2e.bin.Path, "", t.TempDir()) // make helm-plugin's package
		must(t, err)
		h3 := helm3CLI(t)
		h3.Env = nil // no configmap-attacher on its PATH
		expectRefusal(t, h3, "expected plugin to be a folder", "plugin", "install", pkg)
		expectRefusal(t, h3, `"configmap-attacher": executable file not found in $PATH`, grafanaTemplate(ns)...)
	})
}

// Helm 4 passes hooks to its post-renderer (Helm 3 does not): a hook reading opted-in config gets the
// release's revision, and render warns about a pre-upgrade hook, which Helm runs before it creates that
// revision.
func TestHelm4PostRendersHooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	args := append([]string{"template", "plain", testdataPath("plain-chart"), "-n", "prod", "--set", "hooks=true"},
		postRenderer("prod", "-select=configmap/app-config")...)
	reads := func(manifests string) map[string]string { // Kind/name -> the ConfigMap it reads
		objs, err := framework.ParseManifests(manifests)
		must(t, err)
		out := map[string]string{}
		for _, o := range objs {
			for _, r := range configReads(t, o) {
				out[o.GetKind()+"/"+o.GetName()] = r
			}
		}
		return out
	}

	out, stderr, err := helmCLI(t).RunOutput(ctx, args...)
	must(t, err)
	got := reads(out)
	rev := got["Rollout/app"]
	if !revisionName("ConfigMap/app-config").MatchString(rev) || got["Job/app-smoke-test"] != rev || got["Job/app-migrate"] != rev {
		t.Fatalf("Helm 4: want the Rollout and both hook Jobs reading one revision of app-config, got %v", got)
	}
	if !strings.Contains(stderr, "a pre-upgrade hook reads a renamed revision") || !strings.Contains(stderr, `hook="Job app-migrate"`) {
		t.Fatalf("Helm 4: want render's warning about the pre-upgrade hook on Helm's stderr, got:\n%s", stderr)
	}
	t.Logf("then: Helm 4 post-renders the hooks: the Rollout and both hook Jobs read %s; render warns: %s", rev, strings.TrimSpace(stderr))

	out, err = helm3CLI(t).Run(ctx, args...)
	must(t, err)
	got = reads(out)
	if got["Rollout/app"] != rev || got["Job/app-smoke-test"] != "ConfigMap/app-config" || got["Job/app-migrate"] != "ConfigMap/app-config" {
		t.Fatalf("Helm 3: want the Rollout reading %s and the hooks the chart's app-config, got %v", rev, got)
	}
	t.Log("then: Helm 3 does not: its hooks keep app-config, a name that no longer exists once renamed")
}
