package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/internal/helmplugin"
)

// Helm is a real helm binary built by hack/tools/build.sh (Helm 4 `helm`, Helm 3 `helm3`, or the Helm
// Argo CD ships, `helm-argocd`), pointed at one cluster, with its own config/cache/data directories
// so tests never read or write the user's Helm setup.
type Helm struct {
	Path       string
	Kubeconfig string
	Home       string
	// Env is more KEY=VALUE for helm: HELM_PLUGINS naming where Helm 4's post-renderer plugin is
	// installed, PATH finding Helm 3's executable post-renderer.
	Env []string
}

// The Helm binaries hack/tools/build.sh builds.
const (
	Helm4       = "helm"        // the default Helm (HELM_VERSION)
	Helm3       = "helm3"       // Helm 3, for the compatibility stories (HELM3_VERSION)
	HelmArgoCD  = "helm-argocd" // the Helm Argo CD ships in its image (ARGOCD_HELM_VERSION)
	toolsBinDir = "_output/tools/bin"
)

// HelmBinary returns <repo>/_output/tools/bin/<name> (Helm4, Helm3 or HelmArgoCD), or an error saying
// how to build it.
func HelmBinary(repoRoot, name string) (string, error) {
	p := filepath.Join(repoRoot, toolsBinDir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not built (run hack/tools/build.sh %s): %w", name, name, err)
	}
	return p, nil
}

// Run runs `helm <args> --kubeconfig <k>` and returns its stdout; a failure carries stderr.
func (h Helm) Run(ctx context.Context, args ...string) (string, error) {
	stdout, stderr, err := h.RunOutput(ctx, args...)
	if err != nil {
		return stdout, fmt.Errorf("%w\n%s", err, stderr)
	}
	return stdout, nil
}

// RunOutput runs `helm <args> --kubeconfig <k>` and returns what it wrote to stdout and stderr, the
// error saying how it ended.
func (h Helm) RunOutput(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, h.Path, append(args, "--kubeconfig", h.Kubeconfig)...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(h.Home, "data"),
		"KUBECONFIG="+h.Kubeconfig)
	cmd.Env = append(cmd.Env, h.Env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("%s %s: %w (after %s)", filepath.Base(h.Path), strings.Join(args, " "), err,
			time.Since(start).Round(time.Millisecond))
	}
	return out.String(), errOut.String(), nil
}

// InstallHelmPlugin installs the Helm 4 post-renderer plugin with bin as a development build does
// (make helm-plugin's directory, `helm plugin install <directory>`: Helm verifies no signature for a
// local directory) into h's data directory. It returns the plugins directory, for HELM_PLUGINS. A
// release's signed package is installed, and verified, by the release story (TestRealNodeInstallsASignedRelease…).
func InstallHelmPlugin(ctx context.Context, h Helm, repoRoot, bin string) (string, error) {
	dir, err := helmplugin.Unpacked(ctx, filepath.Join(repoRoot, "deploy/helm-plugin"), bin, "", filepath.Join(h.Home, "package"))
	if err != nil {
		return "", err
	}
	if _, err := h.Run(ctx, "plugin", "install", dir); err != nil {
		return "", err
	}
	return filepath.Join(h.Home, "data", "plugins"), nil
}

// ParseManifests splits rendered multi-document YAML (helm template, helm get manifest/hooks) into
// objects, skipping empty documents.
func ParseManifests(s string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for i, doc := range splitYAML(s) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

func splitYAML(s string) []string {
	var docs []string
	var cur strings.Builder
	for line := range strings.Lines(s) {
		if strings.TrimRight(line, " \r\n") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.String())
}

// FindJob returns the one Job in rendered manifests, typed.
func FindJob(manifests string) (*batchv1.Job, error) {
	objs, err := ParseManifests(manifests)
	if err != nil {
		return nil, err
	}
	var jobs []*batchv1.Job
	for _, o := range objs {
		if o.GetKind() != "Job" {
			continue
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		var j batchv1.Job
		if err := yaml.UnmarshalStrict(b, &j); err != nil {
			return nil, fmt.Errorf("Job %s: %w", o.GetName(), err)
		}
		jobs = append(jobs, &j)
	}
	if len(jobs) != 1 {
		return nil, fmt.Errorf("want exactly one Job in the manifests, found %d", len(jobs))
	}
	return jobs[0], nil
}
