//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The README's kubectl/kustomize recipe, exactly: `kubectl kustomize <dir> | configmap-attacher render
// -all-configmaps -namespace <ns> | kubectl apply -f -`, with the controller. kubectl apply never
// deletes what left the manifests, so the previous revision stays for the old ReplicaSet, and the
// garbage collector removes it with that ReplicaSet once attached. The write-up's story: an install,
// three config changes as paused canaries, a spot replacement, pruning with revisionHistoryLimit 1.
func TestKubectlKustomizeThroughRender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-kustomize")
	startController(t, nil, ns)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: [rollout.yaml]\nconfigMapGenerator:\n"+
		"- name: app-config\n  files: [greeting.txt]\n  options: {disableNameSuffixHash: true}\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "rollout.yaml"), []byte(kustomizeRollout), 0o644))
	kubectl := filepath.Join(e2e.root, "_output/tools/bin/kubectl")
	s := &helmStory{t: t, ns: ns, rollout: "app",
		deploy: func(i int) {
			must(t, os.WriteFile(filepath.Join(dir, "greeting.txt"), fmt.Appendf(nil, "hello-%d\n", i), 0o644))
			recipe := fmt.Sprintf("kubectl kustomize %s | configmap-attacher render -all-configmaps -namespace %s | kubectl apply -n %s -f -", dir, ns, ns)
			cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", recipe)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+e2e.cluster.Kubeconfig,
				"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+filepath.Dir(e2e.bin.Path)+string(os.PathListSeparator)+os.Getenv("PATH"))
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", recipe, err, out)
			}
			t.Logf("%s (%s):\n%s", recipe, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
		},
		check: func(cm string) {
			if !revisionName("app-config").MatchString(cm) {
				t.Fatalf("the Rollout mounts %s, want render's app-config-<hash>", cm)
			}
			expectKept(t, ns, cm)
		},
	}
	s.run()
}

// kustomizeRollout is the write-up's Rollout reading app-config, keeping one old ReplicaSet.
const kustomizeRollout = `apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: app
spec:
  replicas: 3
  revisionHistoryLimit: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        volumeMounts: [{name: config, mountPath: /etc/app}]
      volumes:
      - name: config
        configMap: {name: app-config}
  strategy:
    canary:
      maxSurge: 0
      maxUnavailable: 1
      steps:
      - setWeight: 1
      - pause: {}
`
