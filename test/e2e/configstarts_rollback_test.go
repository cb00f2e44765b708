//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// After a rollback, per key, never a swallowed edit (issue 31): the stories a team replacing Reloader
// runs first. The controller runs with -pinning -reloader-annotations, each story in its own namespace.

var (
	pinV4 = map[string]string{"configuration.json": `{"general": {"projectName": "demo service v4, the fix"}}`}
)

// waitCurrent waits until the current revision of a Deployment or Rollout is one ok accepts, with n
// pods ready and reading the revision's own snapshot of data, and returns it.
func (w triggered) waitCurrent(kind workload.Kind, name string, n int32, data map[string]string, ok func(*appsv1.ReplicaSet) bool) *appsv1.ReplicaSet {
	w.t.Helper()
	var rs *appsv1.ReplicaSet
	must(w.t, framework.Eventually(context.Background(), 2*time.Minute, string(kind)+" "+name+"'s next revision", func(ctx context.Context) (bool, string, error) {
		res, err := e2e.cluster.ResolveWorkload(ctx, workload.Ref{Kind: kind, Namespace: w.ns, Name: name})
		if err != nil {
			return false, err.Error(), nil
		}
		cur, err := res.Current()
		if err != nil {
			return false, "current: " + err.Error(), nil
		}
		if !ok(cur) {
			return false, fmt.Sprintf("current %s (config-hash %q), not the revision awaited", cur.Name, hashOf(cur)), nil
		}
		pods, err := e2e.cluster.PodsOf(ctx, cur)
		if err != nil {
			return false, "", err
		}
		rs = cur
		return len(pods) == int(n) && framework.ReadyPods(pods) == int(n) && cur.Status.Replicas == n, fmt.Sprintf("%s (status.replicas %d): %s", cur.Name, cur.Status.Replicas, framework.DescribePods(pods)), nil
	}))
	pinnedRollout{t: w.t, ns: w.ns}.expectReads(rs, data)
	return rs
}

// notAmong accepts a revision with our annotation that is none of rs: a new one.
func notAmong(rs ...*appsv1.ReplicaSet) func(*appsv1.ReplicaSet) bool {
	return func(n *appsv1.ReplicaSet) bool {
		return hashOf(n) != "" && !slices.ContainsFunc(rs, func(r *appsv1.ReplicaSet) bool { return r.UID == n.UID })
	}
}

func is(r *appsv1.ReplicaSet) func(*appsv1.ReplicaSet) bool {
	return func(n *appsv1.ReplicaSet) bool { return n.UID == r.UID }
}

// undoThenFixForward is the rollback story's end: undo (a tool's command) takes the workload back to
// previous, whose template carries a config-hash value we wrote, now under the tool's own field
// manager; the fix-forward edit of the config then starts a new revision, none of before, and the
// controller took the annotation back, saying from whom, and owns it alone again.
func (w triggered) undoThenFixForward(kind workload.Kind, gvr schema.GroupVersionResource, name string, undo func() (string, error),
	previous *appsv1.ReplicaSet, before ...*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	pods := int32(1) // a Deployment's; a canary's (one pod at its first step, the Rollouts here run 3)
	t := w.t
	t.Helper()
	ctx := context.Background()
	out, err := undo()
	must(t, err)
	t.Logf("when: the undo\n%s", out)
	w.waitCurrent(kind, name, pods, pinV2, is(previous))
	owners, err := e2e.cluster.ConfigHashOwners(ctx, gvr, w.ns, name)
	must(t, err)
	if len(owners) == 0 {
		t.Fatalf("after the undo config-hash is owned by no other field manager: the story needs the undo's own")
	}
	t.Logf("then: %s runs again; config-hash belongs to %v now", previous.Name, owners)

	t.Log("when: the fix-forward edit of app-config")
	w.put(pinV4)
	next := w.waitCurrent(kind, name, pods, pinV4, notAmong(before...))
	msg := expectEvents(t, w.ns, string(kind), name, trigger.ReasonTakenBack, "a value configmap-attacher wrote")
	for _, m := range owners {
		if !strings.Contains(msg, m) {
			t.Fatalf("the %s event does not name %s, which owned the annotation: %s", trigger.ReasonTakenBack, m, msg)
		}
	}
	if owners, err = e2e.cluster.ConfigHashOwners(ctx, gvr, w.ns, name); err != nil || len(owners) > 0 {
		t.Fatalf("config-hash still owned by %v besides us (%v)", owners, err)
	}
	expectOnlyOurAnnotation(t, gvr, w.ns, name)
	t.Logf("then: a new revision %s (revision %s) runs the fix", next.Name, framework.RevisionOf(next))
	return next
}

// `kubectl rollout undo` copies the previous revision's template, our config-hash value included,
// under its own field manager. The fix-forward edit of the config that follows starts a new revision:
// the controller takes back the annotation (a value it wrote), with an Event naming the manager.
func TestConfigStartsANewRevisionAfterKubectlRolloutUndo(t *testing.T) {
	t.Parallel()
	eachAdmission(t, configStartsANewRevisionAfterKubectlRolloutUndo)
}

// configStartsANewRevisionAfterKubectlRolloutUndo is the story of TestConfigStartsANewRevisionAfterKubectlRolloutUndo in one admission mode.
func configStartsANewRevisionAfterKubectlRolloutUndo(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("config-starts-undo"))
	a.start(t, "Fail", []string{"-reloader-annotations"}, ns)
	w := triggered{t: t, ns: ns}
	w.put(pinV1)
	_, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PodTemplate("web", []string{"app-config"}, nil), nil)
	must(t, err)
	rs1 := w.waitCurrent(workload.Deployment, "web", 1, pinV1, func(*appsv1.ReplicaSet) bool { return true })
	w.optIn(framework.DeploymentGVR, "Deployment", "web")
	w.put(pinV2)
	rs2 := w.waitCurrent(workload.Deployment, "web", 1, pinV2, notAmong(rs1))
	w.put(pinV3)
	rs3 := w.waitCurrent(workload.Deployment, "web", 1, pinV3, notAmong(rs1, rs2))
	t.Logf("given: Deployment web opted in; two config edits made %s and %s", rs2.Name, rs3.Name)

	w.undoThenFixForward(workload.Deployment, framework.DeploymentGVR, "web", func() (string, error) {
		return e2e.cluster.Kubectl(ctx, "rollout", "undo", "-n", ns, "deployment/web")
	}, rs2, rs1, rs2, rs3)
}

// The same with `kubectl argo rollouts undo` on a canary Rollout: the fix-forward edit starts a new
// canary.
func TestConfigStartsANewCanaryAfterKubectlArgoRolloutsUndo(t *testing.T) {
	t.Parallel()
	eachAdmission(t, configStartsANewCanaryAfterKubectlArgoRolloutsUndo)
}

// configStartsANewCanaryAfterKubectlArgoRolloutsUndo is the story of TestConfigStartsANewCanaryAfterKubectlArgoRolloutsUndo in one admission mode.
func configStartsANewCanaryAfterKubectlArgoRolloutsUndo(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("config-starts-argo-undo"))
	a.start(t, "Fail", []string{"-reloader-annotations"}, ns)
	w := triggered{t: t, ns: ns}
	w.put(pinV1)
	must(t, e2e.cluster.CreateRollout(ctx, ns, "demo", framework.RolloutSpec{Replicas: 3, ConfigMaps: []string{"app-config"}, Annotations: framework.ReloaderAuto}))
	rs1 := w.waitCurrent(workload.Rollout, "demo", 3, pinV1, func(*appsv1.ReplicaSet) bool { return true })
	waitRecord(t, ns, "Rollout", "demo", time.Minute)
	promoted := func(data map[string]string, before ...*appsv1.ReplicaSet) *appsv1.ReplicaSet {
		t.Helper()
		w.put(data)
		rs := w.waitCurrent(workload.Rollout, "demo", 1, data, notAmong(before...)) // the canary's one pod
		promotePaused(t, ns, "demo")
		waitStable(t, ns, "demo", rs)
		return rs
	}
	rs2 := promoted(pinV2, rs1)
	rs3 := promoted(pinV3, rs1, rs2)
	t.Logf("given: canary Rollout demo opted in; two config edits made %s and %s, each promoted", rs2.Name, rs3.Name)

	w.undoThenFixForward(workload.Rollout, workload.RolloutGVR, "demo", func() (string, error) {
		return e2e.cluster.ArgoRollouts(ctx, "undo", "demo", "-n", ns)
	}, rs2, rs1, rs2, rs3)
	ro, err := e2e.cluster.Rollout(ctx, ns, "demo")
	must(t, err)
	if ro.Status.StableRS != rs3.Labels[workload.RolloutHashLabel] {
		t.Fatalf("stable is %q, want %s's: the fix goes through the canary", ro.Status.StableRS, rs3.Name)
	}
	t.Logf("then: the fix runs as a canary, %s still stable", rs3.Name)
}

// waitRecord waits for the controller's first look at a workload (its record).
func waitRecord(t *testing.T, ns, kind, name string, timeout time.Duration) {
	t.Helper()
	record := trigger.RecordName(kind, name)
	must(t, framework.Eventually(context.Background(), timeout, "the controller's record "+record, func(ctx context.Context) (bool, string, error) {
		_, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, record, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err), nil
	}))
}

// waitStable waits until rs is the Rollout's stable ReplicaSet.
func waitStable(t *testing.T, ns, name string, rs *appsv1.ReplicaSet) {
	t.Helper()
	must(t, framework.Eventually(context.Background(), 2*time.Minute, rs.Name+" stable", func(ctx context.Context) (bool, string, error) {
		ro, err := e2e.cluster.Rollout(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		return ro.Status.StableRS == rs.Labels[workload.RolloutHashLabel], "stable " + ro.Status.StableRS, nil
	}))
}

// shortHash is the content hash scheme by hand: the first 10 hex digits of the SHA-256 of a canonical
// JSON string the test writes out itself (docs/config-starts.md, The hash).
func shortHash(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(sum[:])[:10]
}

// Follow what the pods read: a Deployment reads one key of app-settings (configMapKeyRef) and pulls its
// image with Secret registry. A credential refresher rotating the pull Secret and an edit of a key no
// container reads start nothing; the edit of the key read starts one revision, and its config-hash
// is the hash of that key alone (written out by hand below): neither the Secret nor the other key
// was counted.
func TestConfigStartsFollowsWhatThePodsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-reads")
	startTriggerController(t, ns)
	_, err := e2e.cluster.PutConfigMap(ctx, ns, "app-settings", map[string]string{"port": "80", "debug": "false"})
	must(t, err)
	secrets := e2e.cluster.Kube.CoreV1().Secrets(ns)
	_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example":{"auth":"djE="}}}`)}}, metav1.CreateOptions{})
	must(t, err)
	tmpl := framework.PodTemplate("web", nil, nil)
	tmpl.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
	tmpl.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PORT", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app-settings"}, Key: "port"}}}}
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", tmpl, nil)
	must(t, err)
	rs1 := deploymentReplicaSet(t, ns, web)
	triggered{t: t, ns: ns}.optIn(framework.DeploymentGVR, "Deployment", "web")
	t.Log("given: Deployment web (reloader.stakater.com/auto) reads key port of app-settings and pulls with Secret registry")

	t.Log("when: the pull Secret is rotated, key debug (read by no container) is edited, then key port")
	rotated, err := secrets.Get(ctx, "registry", metav1.GetOptions{})
	must(t, err)
	rotated.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"registry.example":{"auth":"djI="}}}`)
	_, err = secrets.Update(ctx, rotated, metav1.UpdateOptions{})
	must(t, err)
	_, err = e2e.cluster.PutConfigMap(ctx, ns, "app-settings", map[string]string{"port": "80", "debug": "true"})
	must(t, err)
	_, err = e2e.cluster.PutConfigMap(ctx, ns, "app-settings", map[string]string{"port": "8080", "debug": "true"})
	must(t, err)

	// By hand: what a pod reads of app-settings through key port, then the workload's config-hash
	// with its check.
	port := shortHash(`{"data":{"port":"8080"}}`)
	want := withCheck(shortHash(`{"ConfigMap/app-settings[port]":"` + port + `"}`))
	var next *appsv1.ReplicaSet
	must(t, framework.Eventually(ctx, 2*time.Minute, "web's next revision", func(ctx context.Context) (bool, string, error) {
		list, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var made []string
		for i := range list.Items {
			if rs := &list.Items[i]; rs.UID != rs1.UID {
				next = rs
				made = append(made, rs.Name+" "+hashOf(rs))
			}
		}
		if len(made) > 1 {
			return false, "", fmt.Errorf("revisions made: %v; want one", made)
		}
		return len(made) == 1, "none yet", nil
	}))
	if got := hashOf(next); got != want {
		t.Fatalf("revision %s has config-hash %q, want %q: the hash of key port alone (the pull Secret or key debug was counted)", next.Name, got, want)
	}
	msg := expectEvents(t, ns, "Deployment", "web", trigger.ReasonStarted, "ConfigMap/app-settings[port] changed")
	if strings.Contains(msg, "Secret/registry") {
		t.Fatalf("the pull Secret is named as a change: %s", msg)
	}
	t.Logf("then: one revision, %s, with config-hash %s: key port alone", next.Name, want)
}
