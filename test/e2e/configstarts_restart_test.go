//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The config trigger across restarts, a lost key and an object that never settles: the controller
// runs with -reloader-annotations alone (no pinning), each story in its own namespace, and is stopped
// and started again as the story says.

// withCheck is a value of config-hash as the controller writes it for content hash h, by hand:
// printf '%s' "configmap-attacher.io/config-hash:$h" | sha256sum | cut -c1-6 (docs/config-starts.md).
func withCheck(h string) string {
	sum := sha256.Sum256([]byte("configmap-attacher.io/config-hash:" + h))
	return h + "." + hex.EncodeToString(sum[:])[:6]
}

// givenFollowing is a Deployment web of ns, reading tmpl, opted in with Reloader's annotation and
// seen by the controller (its record exists).
func givenFollowing(t *testing.T, ns string, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	ctx := context.Background()
	_, err := e2e.cluster.CreateDeployment(ctx, ns, "web", tmpl, nil)
	must(t, err)
	must(t, framework.Eventually(ctx, time.Minute, "web's first ReplicaSet", func(ctx context.Context) (bool, string, error) {
		return len(ownReplicaSets(t, ns, "web")) == 1, "none yet", nil
	}))
	must(t, e2e.cluster.Annotate(ctx, framework.DeploymentGVR, ns, "web", framework.ReloaderAuto))
	waitRecord(t, ns, "Deployment", "web", time.Minute)
}

// A Deployment following a Secret with Reloader's annotation, one edit made (revision 2); the hash key
// Secret deleted and the controller restarted, nothing edited: it makes a new key, re-keys the record
// from what the Secret holds, says so, and starts no revision in 40 s; a real edit of the Secret then
// starts exactly one.
func TestConfigStartsALostHashKeyStartsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-lost-key")
	// A key Secret of its own: the other stories' controllers follow the default one.
	key := ns + "-hash-key"
	keys := e2e.cluster.Kube.CoreV1().Secrets("kube-system")
	t.Cleanup(func() { _ = keys.Delete(context.Background(), key, metav1.DeleteOptions{}) })
	args := []string{"-reloader-annotations", "-config-hash-key-secret=" + key}
	first := startController(t, args, ns)
	_, err := e2e.cluster.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-creds", Namespace: ns},
		StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
	must(t, err)
	givenFollowing(t, ns, framework.PodTemplate("web", nil, []string{"db-creds"}))
	editSecret(t, ns, "db-creds", "hunter3")
	waitNewRevision(t, ns, "web", 2)
	made, err := keys.Get(ctx, key, metav1.GetOptions{})
	must(t, err)
	t.Logf("given: Deployment web reading Secret db-creds, %s; an edit started revision 2; hash key Secret kube-system/%s", api.ReloaderAuto, key)

	t.Log("when: the key Secret is deleted and the controller restarted, nothing edited")
	must(t, keys.Delete(ctx, key, metav1.DeleteOptions{}))
	must(t, first.Stop())
	startController(t, args, ns)
	must(t, framework.Eventually(ctx, time.Minute, "a new hash key", func(ctx context.Context) (bool, string, error) {
		s, err := keys.Get(ctx, key, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "none yet", nil
		}
		return err == nil && s.UID != made.UID, "the old one", err
	}))
	expectEvents(t, ns, "Deployment", "web", trigger.ReasonKeyChanged, "carried over", "no revision starts")
	time.Sleep(40 * time.Second)
	if n := len(ownReplicaSets(t, ns, "web")); n != 2 {
		t.Fatalf("%d ReplicaSets 40 s after the restart with a new key, want 2: content that did not change started a revision", n)
	}
	t.Log("then: a new key, a Warning saying the record was carried over to it, and no new revision in 40 s")

	t.Log("when: db-creds is edited")
	editSecret(t, ns, "db-creds", "hunter4")
	third := waitNewRevision(t, ns, "web", 3)
	time.Sleep(settled)
	if n := len(ownReplicaSets(t, ns, "web")); n != 3 {
		t.Fatalf("%d ReplicaSets after one edit, want 3", n)
	}
	t.Logf("then: exactly one revision, %s (%s=%s)", framework.RevisionOf(third), api.ConfigHashAnnotation, hashOf(third))
}

func editSecret(t *testing.T, ns, name, password string) {
	t.Helper()
	patch := fmt.Sprintf(`{"stringData":{"password":%q}}`, password)
	_, err := e2e.cluster.Kube.CoreV1().Secrets(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
}

// The controller stopped; an image deploy, then an edit of the ConfigMap the Deployment reads, both
// while it is stopped: on start, the edit reaches pods, in a revision whose content is the new one
// (its config-hash the hash of the edited ConfigMap, written out by hand below).
func TestConfigStartsAnEditMadeWhileTheControllerWasDownReachesPods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-while-down")
	args := []string{"-reloader-annotations"}
	first := startController(t, args, ns)
	_, err := e2e.cluster.PutConfigMap(ctx, ns, "app-config", map[string]string{"level": "info"})
	must(t, err)
	givenFollowing(t, ns, framework.PodTemplate("web", []string{"app-config"}, nil))
	_, err = e2e.cluster.PutConfigMap(ctx, ns, "app-config", map[string]string{"level": "warn"})
	must(t, err)
	waitNewRevision(t, ns, "web", 2)
	t.Logf("given: Deployment web reading ConfigMap app-config, %s; an edit started revision 2", api.ReloaderAuto)

	t.Log("when: the controller stops; a deploy changes the image, then app-config is edited")
	must(t, first.Stop())
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}}}`), metav1.PatchOptions{})
	must(t, err)
	deployed := waitNewRevision(t, ns, "web", 3)
	_, err = e2e.cluster.PutConfigMap(ctx, ns, "app-config", map[string]string{"level": "debug"})
	must(t, err)
	t.Logf("      the deploy made revision %s", framework.RevisionOf(deployed))

	t.Log("when: the controller starts")
	startController(t, args, ns)
	next := waitNewRevision(t, ns, "web", 4)
	// By hand: printf '%s' '{"data":{"level":"debug"}}' | sha256sum, then the workload's value over it.
	want := withCheck(shortHash(`{"ConfigMap/app-config":"` + shortHash(`{"data":{"level":"debug"}}`) + `"}`))
	if got := hashOf(next); got != want {
		t.Fatalf("revision %s has %s=%q, want %q: the content after the edit", framework.RevisionOf(next), api.ConfigHashAnnotation, got, want)
	}
	if next.Spec.Template.Spec.Containers[0].Image != "nginx:1.28" {
		t.Errorf("revision %s runs %s, want the deployed image nginx:1.28", framework.RevisionOf(next), next.Spec.Template.Spec.Containers[0].Image)
	}
	must(t, framework.Eventually(ctx, 2*time.Minute, "its pods ready", func(ctx context.Context) (bool, string, error) {
		rs, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).Get(ctx, next.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return rs.Status.ReadyReplicas > 0 && rs.Status.ReadyReplicas == *rs.Spec.Replicas, fmt.Sprintf("%d ready", rs.Status.ReadyReplicas), nil
	}))
	evs, err := e2e.cluster.EventsOn(ctx, ns, "Deployment", "web", trigger.ReasonStarted)
	must(t, err)
	if len(evs) != 2 || !strings.Contains(evs[1].Message, "ConfigMap/app-config changed: "+api.ConfigHashAnnotation+"="+want) {
		t.Fatalf("%s events %v: want the given edit's and one for the edit made while the controller was down", trigger.ReasonStarted, evs)
	}
	t.Logf("then: revision %s (%s=%s), with the deployed image and the edited content, runs its pods", framework.RevisionOf(next), api.ConfigHashAnnotation, want)
}

// A ConfigMap rewritten every second (a lease) while the Deployment reads it and another ConfigMap,
// edited once: the settle window never closes, yet the revision comes within -config-max-wait of the
// edit (20 s, ten settle windows of 2 s: the defaults, written out), with a Warning naming the lease.
func TestConfigStartsAChangeWaitsNoLongerThanTheMaximumWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-max-wait")
	const maxWait = 20 * time.Second
	startController(t, []string{"-reloader-annotations", "-config-settle=2s", "-config-max-wait=" + maxWait.String()}, ns)
	_, err := e2e.cluster.PutConfigMap(ctx, ns, "lease", map[string]string{"renewed": "0"})
	must(t, err)
	_, err = e2e.cluster.PutConfigMap(ctx, ns, "app-config", map[string]string{"level": "info"})
	must(t, err)
	givenFollowing(t, ns, framework.PodTemplate("web", []string{"app-config", "lease"}, nil))
	t.Logf("given: Deployment web reading ConfigMaps app-config and lease, %s; -config-settle=2s -config-max-wait=%s", api.ReloaderAuto, maxWait)

	t.Log("when: lease is rewritten every second, for up to 2 minutes, and app-config is edited once")
	stop := rewriteEverySecond(t, ns, "lease", 2*time.Minute)
	defer stop()
	time.Sleep(5 * time.Second)
	_, err = e2e.cluster.PutConfigMap(ctx, ns, "app-config", map[string]string{"level": "debug"})
	must(t, err)
	edited := time.Now()
	var started corev1.Event
	must(t, framework.Eventually(ctx, maxWait+30*time.Second, "a revision for the edit of app-config", func(ctx context.Context) (bool, string, error) {
		evs, err := e2e.cluster.EventsOn(ctx, ns, "Deployment", "web", trigger.ReasonStarted)
		for _, e := range evs {
			if strings.Contains(e.Message, "ConfigMap/app-config") {
				started = e
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d revisions started, none for app-config", len(evs)), err
	}))
	waited := time.Since(edited)
	rewrites := stop()
	evs, err := e2e.cluster.EventsOn(ctx, ns, "Deployment", "web", trigger.ReasonNeverSettled)
	must(t, err)
	if len(evs) == 0 || !strings.Contains(evs[0].Message, "ConfigMap/lease") {
		t.Fatalf("Warnings %s: %v; want one naming ConfigMap/lease, which kept the change waiting", trigger.ReasonNeverSettled, evs)
	}
	t.Logf("then: %q %s after the edit (lease rewritten %d times), with the Warning %q", started.Message, waited.Round(time.Second), rewrites, evs[0].Message)
}

// rewriteEverySecond changes ConfigMap name's data every second, for at most d or until stop is
// called; stop returns how many times it was rewritten.
func rewriteEverySecond(t *testing.T, ns, name string, d time.Duration) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for tick := time.NewTicker(time.Second); ; {
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
				n++
				if _, err := e2e.cluster.PutConfigMap(ctx, ns, name, map[string]string{"renewed": fmt.Sprint(n)}); err != nil && ctx.Err() == nil {
					t.Errorf("rewriting ConfigMap %s: %v", name, err)
					tick.Stop()
					return
				}
			}
		}
	}()
	var n int
	stopped := false
	return func() int {
		if !stopped {
			cancel()
			n, stopped = <-done, true
		}
		return n
	}
}
