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
)

// Helm is the real helm binary (Helm 3, built by hack/tools/build.sh), pointed at one cluster, with its
// own config/cache/data directories so tests never read or write the user's Helm setup.
type Helm struct {
	Path       string
	Kubeconfig string
	Home       string
}

// HelmBinary returns <repo>/_output/tools/bin/helm, or an error saying how to build it.
func HelmBinary(repoRoot string) (string, error) {
	p := filepath.Join(repoRoot, "_output/tools/bin/helm")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("helm not built (run hack/tools/build.sh): %w", err)
	}
	return p, nil
}

// Run runs `helm <args> --kubeconfig <k>` and returns its stdout; a failure carries stderr.
func (h Helm) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.Path, append(args, "--kubeconfig", h.Kubeconfig)...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(h.Home, "data"),
		"KUBECONFIG="+h.Kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w (after %s)\n%s", strings.Join(args, " "), err,
			time.Since(start).Round(time.Millisecond), stderr.String())
	}
	return stdout.String(), nil
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
