//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The config revisions the history story deploys: the walkthrough's ConfigMap content, and a
// Secret whose token changes in revision 3.
var (
	historyConfigs = []map[string]string{
		{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\"\n  }\n}\n", "key-1": "value-1"},
		{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\",\n    \"faulty\": true\n  }\n}\n", "key-1": "value-1", "key-2": "value-2"},
		{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service v3\"\n  }\n}\n", "key-1": "value-1", "key-2": "value-2", "key-3": "value-3"},
	}
	historySecrets = []string{"token-from-revision-one", "token-from-revision-one", "token-from-revision-three"}
)

// historyStory deploys Rollout demo through three config revisions with the real Job, like a deploy
// pipeline: revision 1, revision 2 promoted, revision 3 paused as a canary.
type historyStory struct {
	t          *testing.T
	ns         string
	configMaps []string // per revision
	secrets    []string // per revision (revisions 1 and 2 share one)
	rs         []*appsv1.ReplicaSet
}

func (s *historyStory) deploy(i int) {
	t, ctx := s.t, context.Background()
	t.Helper()
	cm, err := e2e.cluster.CreateConfigRevision(ctx, s.ns, "demo-cm", historyConfigs[i], true)
	must(t, err)
	sec := s.secretRevision(historySecrets[i])
	s.configMaps, s.secrets = append(s.configMaps, cm.Name), append(s.secrets, sec)
	if i == 0 {
		must(t, e2e.cluster.CreateRollout(ctx, s.ns, "demo", framework.RolloutSpec{Replicas: 2, ConfigMaps: []string{cm.Name}, Secrets: []string{sec}}))
	} else {
		must(t, e2e.cluster.SetRolloutConfig(ctx, s.ns, "demo", []string{cm.Name}, []string{sec}))
	}
	r := e2e.bin.Run(ctx, nil, "-rollout", "demo", "-namespace", s.ns, "-configmaps", cm.Name, "-secrets", sec)
	if r.Code != 0 {
		t.Fatalf("the attacher Job failed: %s", r)
	}
	res, err := e2e.cluster.Resolve(ctx, s.ns, "demo")
	must(t, err)
	rs, err := res.Current()
	must(t, err)
	s.rs = append(s.rs, rs)
	t.Logf("revision %d: ReplicaSet %s runs ConfigMap %s and Secret %s", i+1, rs.Name, cm.Name, sec)
}

// secretRevision creates a Secret the way the renderer names them: <name>-<hash> with the original
// name in an annotation (the ConfigMaps carry the original chart's names, without it).
func (s *historyStory) secretRevision(token string) string {
	name := fmt.Sprintf("demo-env-%x", sha256.Sum256([]byte(token)))[:len("demo-env-")+10]
	_, err := e2e.cluster.Kube.CoreV1().Secrets(s.ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns,
			Labels:      map[string]string{api.RevisionedLabel: api.RevisionedValue},
			Annotations: map[string]string{api.OriginalNameAnnotation: "demo-env"}},
		StringData: map[string]string{"TOKEN": token, "LOG_LEVEL": "info"},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.t.Fatal(err)
	}
	return name
}

func (s *historyStory) waitPaused() {
	s.t.Helper()
	must(s.t, e2e.cluster.WaitPaused(context.Background(), 90*time.Second, s.ns, "demo"))
}

// waitStable waits until the Rollout's stable ReplicaSet is rs.
func (s *historyStory) waitStable(rs *appsv1.ReplicaSet) {
	s.t.Helper()
	must(s.t, framework.Eventually(context.Background(), 90*time.Second, "ReplicaSet "+rs.Name+" to be stable", func(ctx context.Context) (bool, string, error) {
		ro, err := e2e.cluster.Rollout(ctx, s.ns, "demo")
		if err != nil {
			return false, "", err
		}
		return ro.Status.StableRS == rs.Labels[workload.RolloutHashLabel], "stableRS " + ro.Status.StableRS, nil
	}))
}

// run runs the real binary and logs what a user would see.
func (s *historyStory) run(args ...string) framework.Result {
	s.t.Helper()
	r := e2e.bin.Run(context.Background(), []string{"LOG_LEVEL=warn"}, args...)
	s.t.Logf("$ configmap-attacher %s   (exit %d, %s)\n%s%s", strings.Join(args, " "), r.Code, r.Duration.Round(time.Millisecond), r.Stdout, r.Stderr)
	return r
}

func (s *historyStory) succeed(args ...string) string {
	s.t.Helper()
	r := s.run(args...)
	if r.Code != 0 {
		s.t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	return r.Stdout
}

func (s *historyStory) historyJSON() *history.History {
	s.t.Helper()
	var h history.History
	must(s.t, json.Unmarshal([]byte(s.succeed("history", "rollout/demo", "-n", s.ns, "-o", "json")), &h))
	return &h
}

// historyRow returns the table lines of one revision: its row and its config continuation lines.
func historyRow(table string, revision int) string {
	var out []string
	in := false
	for _, l := range strings.Split(table, "\n") {
		switch {
		case strings.HasPrefix(l, fmt.Sprintf("%d ", revision)):
			in = true
		case l == "" || (l[0] != ' '):
			in = false
		}
		if in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func (s *historyStory) expectContains(what, got string, wants ...string) {
	t := s.t
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func (s *historyStory) expectNotContains(what, got string, unwanted ...string) {
	t := s.t
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(got, w) {
			t.Errorf("%s contains %q:\n%s", what, w, got)
		}
	}
}

func TestHistoryAndDiff(t *testing.T) {
	t.Parallel()
	s := &historyStory{t: t, ns: givenNamespace(t, "history-diff")}

	// Given Rollout demo deployed through three config revisions: 1, then 2 promoted, then 3 paused
	// as a canary, each attached by the Job.
	s.deploy(0)
	must(t, e2e.cluster.WaitPods(context.Background(), 90*time.Second, s.rs[0], 2))
	s.deploy(1)
	s.waitPaused()
	promotePaused(t, s.ns, "demo")
	s.waitStable(s.rs[1])
	s.deploy(2)
	s.waitPaused()

	t.Run("history lists each revision with its role and config", func(t *testing.T) {
		s := *s
		s.t = t
		// When the user asks for the history, flags after the workload as kubectl users type them.
		table := s.succeed("history", "rollout/demo", "-n", s.ns)
		// Then each revision shows its role and exactly the config it mounts, attached.
		s.expectContains("the header", table, "REVISION  REPLICASET")
		for i, role := range []string{"old", "stable", "canary"} {
			r := historyRow(table, i+1)
			s.expectContains(fmt.Sprintf("revision %d", i+1), r, s.rs[i].Name, role, "configmap/"+s.configMaps[i], "secret/"+s.secrets[i])
			s.expectNotContains(fmt.Sprintf("revision %d", i+1), r, "(MISSING)", "(not attached)")
		}
		// And scripts get the same facts in JSON.
		h := s.historyJSON()
		if len(h.Revisions) != 3 {
			t.Fatalf("%d revisions in JSON, want 3", len(h.Revisions))
		}
		for i, want := range []workload.Role{workload.RoleCanary, workload.RoleStable, workload.RoleOld} {
			r := h.Revisions[i]
			if r.Revision != int64(3-i) || r.Role != want || r.ReplicaSet != s.rs[2-i].Name {
				t.Errorf("JSON revision %d: %d %s %s, want %d %s %s", i, r.Revision, r.Role, r.ReplicaSet, 3-i, want, s.rs[2-i].Name)
			}
			for _, c := range r.Config {
				if !c.Exists || !c.Attached || !c.Revisioned {
					t.Errorf("revision %d: %+v, want existing, attached, revisioned", r.Revision, c)
				}
				if want := map[refs.Kind]string{refs.ConfigMap: "demo-cm", refs.Secret: "demo-env"}[c.Kind]; c.OriginalName != want {
					t.Errorf("revision %d: %s original name %q, want %q", r.Revision, c.Name, c.OriginalName, want)
				}
			}
		}
		// And YAML parses too.
		s.expectContains("-o yaml", s.succeed("history", "-o", "yaml", "ro/demo", "--namespace", s.ns), "role: canary", "originalName: demo-cm")
	})

	t.Run("diff without revisions shows what the canary changes", func(t *testing.T) {
		s := *s
		s.t = t
		out := s.succeed("diff", "rollout/demo", "-n", s.ns)
		s.expectContains("diff", out,
			fmt.Sprintf("revision 2 (ReplicaSet %s, stable) -> revision 3 (ReplicaSet %s, canary)", s.rs[1].Name, s.rs[2].Name),
			fmt.Sprintf("ConfigMap demo-cm: %s -> %s", s.configMaps[1], s.configMaps[2]),
			"--- a/ConfigMap/demo-cm/configuration.json\n+++ b/ConfigMap/demo-cm/configuration.json\n@@ -1,6 +1,5 @@\n {\n   \"general\": {\n-    \"projectName\": \"demo service\",\n-    \"faulty\": true\n+    \"projectName\": \"demo service v3\"\n   }\n }\n",
			"--- /dev/null\n+++ b/ConfigMap/demo-cm/key-3\n@@ -0,0 +1 @@\n+value-3\n",
			fmt.Sprintf("Secret demo-env: %s -> %s", s.secrets[1], s.secrets[2]),
			"  changed  TOKEN  hmac:")
		// Secret values stay hidden unless asked for.
		s.expectNotContains("diff", out, "token-from", "LOG_LEVEL")
		shown := s.succeed("diff", "rollout/demo", "--show-secrets", "-n", s.ns)
		s.expectContains("diff --show-secrets", shown, "-token-from-revision-one\n", "+token-from-revision-three\n")
	})

	t.Run("diff of two revisions", func(t *testing.T) {
		s := *s
		s.t = t
		out := s.succeed("diff", "rollout/demo", "1", "2", "-n", s.ns)
		s.expectContains("diff 1 2", out,
			"-    \"projectName\": \"demo service\"\n+    \"projectName\": \"demo service\",\n+    \"faulty\": true\n",
			"+value-2\n",
			"Unchanged: secret/"+s.secrets[0]) // revisions 1 and 2 share one Secret
	})

	t.Run("errors name what is wrong", func(t *testing.T) {
		s := *s
		s.t = t
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"history", "rollout/nope", "-n", s.ns}, 1, "Rollout " + s.ns + "/nope: not found"},
			{[]string{"history", "statefulset/demo", "-n", s.ns}, 1, `unsupported workload kind "statefulset"`},
			{[]string{"diff", "rollout/demo", "9", "-n", s.ns}, 1, "has no revision 9 (revisions: 3 canary, 2 stable, 1)"},
			{[]string{"history"}, 2, "want one workload"},
			{[]string{"diff", "rollout/demo", "three"}, 2, `revision "three" is not a revision number`},
		} {
			r := s.run(tc.args...)
			if r.Code != tc.code || !strings.Contains(r.Stderr, tc.want) || r.Stdout != "" {
				t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit %d and %q", tc.args, r.Code, r.Stderr, r.Stdout, tc.code, tc.want)
			}
			if lines := strings.Count(strings.TrimSpace(r.Stderr), "\n") + 1; tc.code == 1 && lines != 1 {
				t.Errorf("%v: %d lines on stderr, want one", tc.args, lines)
			}
		}
	})

	t.Run("the namespace defaults to the kubeconfig context's", func(t *testing.T) {
		s := *s
		s.t = t
		bin := e2e.bin
		bin.Kubeconfig = kubeconfigWithNamespace(t, s.ns)
		r := bin.Run(context.Background(), []string{"LOG_LEVEL=warn"}, "history", "rollout/demo")
		if r.Code != 0 || !strings.Contains(r.Stdout, s.rs[2].Name) {
			t.Errorf("without -n: %s", r)
		}
	})

	t.Run("as a kubectl plugin", func(t *testing.T) {
		s := *s
		s.t = t
		kubectl := filepath.Join(e2e.root, "_output/tools/bin/kubectl")
		if _, err := os.Stat(kubectl); err != nil {
			if kubectl, err = exec.LookPath("kubectl"); err != nil {
				t.Skip("no kubectl to run the plugin with")
			}
		}
		dir := t.TempDir()
		must(t, os.Symlink(e2e.bin.Path, filepath.Join(dir, "kubectl-configmap_revisions")))
		cmd := exec.Command(kubectl, "configmap-revisions", "history", "rollout/demo", "-n", s.ns)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+e2e.bin.Kubeconfig, "LOG_LEVEL=warn")
		out, err := cmd.Output()
		t.Logf("$ kubectl configmap-revisions history rollout/demo -n %s\n%s", s.ns, out)
		if err != nil || !strings.Contains(string(out), s.rs[2].Name) {
			t.Errorf("kubectl plugin: %v\n%s", err, out)
		}
	})

	// When revision 1's ConfigMap is deleted by hand (its ReplicaSet still exists).
	must(t, e2e.cluster.Kube.CoreV1().ConfigMaps(s.ns).Delete(context.Background(), s.configMaps[0], metav1.DeleteOptions{}))
	t.Logf("$ kubectl delete configmap %s", s.configMaps[0])

	t.Run("a missing ConfigMap is marked and explained", func(t *testing.T) {
		s := *s
		s.t = t
		table := s.succeed("history", "rollout/demo", "-n", s.ns)
		s.expectContains("revision 1", historyRow(table, 1), "configmap/"+s.configMaps[0]+" (MISSING)")
		s.expectNotContains("revisions 2 and 3", historyRow(table, 2)+historyRow(table, 3), "(MISSING)")
		s.expectContains("history", table, fmt.Sprintf("WARNING: revision 1 (ReplicaSet %s) needs ConfigMap %s, which does not exist: a rollback to this revision would fail.", s.rs[0].Name, s.configMaps[0]))
		h := s.historyJSON()
		if c := h.Revisions[2].Config[0]; c.Name != s.configMaps[0] || c.Exists {
			t.Errorf("revision 1 in JSON: %+v, want %s not existing", c, s.configMaps[0])
		}
		out := s.succeed("diff", "rollout/demo", "1", "-n", s.ns)
		s.expectContains("diff 1", out, s.configMaps[0]+" (revision 1) does not exist: deleted, or garbage-collected")
	})
}

// kubeconfigWithNamespace writes a copy of the cluster's kubeconfig whose current context defaults to ns.
func kubeconfigWithNamespace(t *testing.T, ns string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(e2e.bin.Kubeconfig)
	must(t, err)
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	path := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

func TestHistoryOfADeployment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &historyStory{t: t, ns: givenNamespace(t, "history-deployment")}

	// Given Deployment web moved from config revision 1 to revision 2, with no attacher run for it.
	var cms []string
	for _, content := range []string{"worker_processes 1;\n", "worker_processes 4;\n"} {
		cm, err := e2e.cluster.CreateConfigRevision(ctx, s.ns, "web-cm", map[string]string{"nginx.conf": content}, true)
		must(t, err)
		cms = append(cms, cm.Name)
	}
	replicas := int32(1)
	_, err := e2e.cluster.Kube.AppsV1().Deployments(s.ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: s.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: framework.PodTemplate("web", cms[:1], nil),
		},
	}, metav1.CreateOptions{})
	must(t, err)
	s.waitDeploymentRuns("web", cms[0])
	must(t, e2e.cluster.SetDeploymentConfig(ctx, s.ns, "web", "web", cms[1:], nil))
	current := s.waitDeploymentRuns("web", cms[1])

	// When the user asks for its history, then revision 2 is current, 1 is old, and neither config is
	// attached (no Job ran).
	table := s.succeed("history", "deploy/web", "-n", s.ns)
	s.expectContains("revision 2", historyRow(table, 2), current.Name, "current", "configmap/"+cms[1]+" (not attached)")
	s.expectContains("revision 1", historyRow(table, 1), "old", "configmap/"+cms[0]+" (not attached)")
	s.expectContains("history", table, "(not attached)       no ownerReference to that ReplicaSet")

	// And diff with no revision compares the previous revision with the current one.
	out := s.succeed("diff", "deployment/web", "-n", s.ns)
	s.expectContains("diff", out,
		fmt.Sprintf("Deployment %s/web: revision 1", s.ns),
		fmt.Sprintf("-> revision 2 (ReplicaSet %s, current)", current.Name),
		fmt.Sprintf("ConfigMap web-cm: %s -> %s\n--- a/ConfigMap/web-cm/nginx.conf\n+++ b/ConfigMap/web-cm/nginx.conf\n@@ -1 +1 @@\n-worker_processes 1;\n+worker_processes 4;\n", cms[0], cms[1]))
}

// waitDeploymentRuns waits until the Deployment's current ReplicaSet mounts configMap.
func (s *historyStory) waitDeploymentRuns(name, configMap string) *appsv1.ReplicaSet {
	s.t.Helper()
	var rs *appsv1.ReplicaSet
	must(s.t, framework.Eventually(context.Background(), 90*time.Second, "Deployment "+name+" to run "+configMap, func(ctx context.Context) (bool, string, error) {
		res, err := workload.Resolve(ctx, workload.ClientSource{Kube: e2e.cluster.Kube, Dynamic: e2e.cluster.Dynamic},
			workload.Ref{Kind: workload.Deployment, Namespace: s.ns, Name: name})
		if err != nil {
			return false, err.Error(), nil
		}
		cur, err := res.Current()
		if err != nil {
			return false, err.Error(), nil
		}
		rs = cur
		return refs.FromPodSpec(&cur.Spec.Template.Spec).Has(refs.Ref{Kind: refs.ConfigMap, Name: configMap}), cur.Name, nil
	}))
	return rs
}
