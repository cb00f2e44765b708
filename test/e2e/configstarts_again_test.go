//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The trigger, read again (issue 37): one deploy is one revision whatever else moves in the namespace,
// and no edit is swallowed when the record cannot be kept. The controller runs with -pinning
// -reloader-annotations, each story in its own namespace.

// ownReplicaSets are the ReplicaSets Deployment name of ns controls.
func ownReplicaSets(t *testing.T, ns, name string) []appsv1.ReplicaSet {
	t.Helper()
	d, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	list, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{})
	must(t, err)
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if c := metav1.GetControllerOf(&rs); c != nil && c.UID == d.UID {
			out = append(out, rs)
		}
	}
	return out
}

// relabelInLoop relabels Secret and ConfigMap name of ns, one after the other, until stop is called;
// stop returns how many times each was relabelled.
func relabelInLoop(t *testing.T, ns, name string) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	n := 0
	wg.Go(func() {
		for ctx.Err() == nil {
			patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"beat":"%d"}}}`, n))
			if _, err := e2e.cluster.Kube.CoreV1().Secrets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
				t.Errorf("relabelling Secret %s: %v", name, err)
				return
			}
			if _, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
				t.Errorf("relabelling ConfigMap %s: %v", name, err)
				return
			}
			n++
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return func() int {
		cancel()
		wg.Wait()
		return n
	}
}

// 20 helm upgrades, each changing the image and the Secret the Deployment reads together (one deploy),
// while an unrelated Secret and ConfigMap of the namespace are relabelled in a loop and Helm rewrites
// its release Secrets: exactly 20 new revisions, all Helm's. The Deployment follows db-creds by a
// Secret reload list (every Secret event of the namespace reaches its follower check) and reads a
// pinned ConfigMap (each new revision's first look waits for its snapshot: the window in which an
// event used to count as an edit made after the revision). One upgrade is one deploy only while Helm
// writes the Deployment within -config-settle of the Secret: on CI's loaded API server, with every
// story at once, one run made 23 revisions, likely from that taking over the default 2 s, so the
// story runs with a window of 10 s.
func TestConfigStartsTwentyHelmUpgradesAreTwentyRevisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-twenty-upgrades")
	const settle = 10 * time.Second
	startPinningControllerWith(t, "Fail", []string{"-reloader-annotations", "-config-settle=" + settle.String()}, ns)
	h := helmCLI(t)
	chart := testdataPath("charts/config-starts-secret")
	for _, kind := range []string{"Secret", "ConfigMap"} {
		meta := metav1.ObjectMeta{Name: "unrelated", Namespace: ns}
		var err error
		if kind == "Secret" {
			_, err = e2e.cluster.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		} else {
			_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		}
		must(t, err)
	}
	helmRun(t, h, "upgrade", "--install", "web", chart, "-n", ns, "--wait", "--timeout", "2m")
	waitRecord(t, ns, "Deployment", "web", time.Minute)
	before := len(ownReplicaSets(t, ns, "web"))
	t.Logf("given: release web (Deployment web reading Secret db-creds and pinned ConfigMap app-config, %s and %s: db-creds), %d ReplicaSet",
		api.ReloaderAuto, api.ReloaderSecretReload, before)

	t.Log("when: 20 helm upgrades change the image and db-creds together, while Secret and ConfigMap unrelated are relabelled in a loop")
	stop := relabelInLoop(t, ns, "unrelated")
	for i := 1; i <= 20; i++ {
		helmRun(t, h, "upgrade", "web", chart, "-n", ns, "--set-string", fmt.Sprintf("tag=3.%d,password=p%d", 10+i, i), "--wait", "--timeout", "2m")
	}
	beats := stop()
	time.Sleep(settle + 10*time.Second) // a revision held back by the loop would come now
	rss := ownReplicaSets(t, ns, "web")
	evs, err := e2e.cluster.EventsOn(ctx, ns, "Deployment", "web", trigger.ReasonStarted)
	must(t, err)
	if got := len(rss) - before; got != 20 || len(evs) != 0 {
		var lines []string
		for _, rs := range rss {
			lines = append(lines, fmt.Sprintf("%s (revision %s, %s=%q, created %s)", rs.Name, framework.RevisionOf(&rs), api.ConfigHashAnnotation, hashOf(&rs),
				rs.CreationTimestamp.Format(time.TimeOnly)))
		}
		for _, ev := range evs {
			lines = append(lines, fmt.Sprintf("Event %s at %s: %s", ev.Reason, ev.LastTimestamp.Format(time.TimeOnly), ev.Message))
		}
		t.Fatalf("%d new ReplicaSets for 20 upgrades, %d started by the controller; want 20, all Helm's (one deploy, one revision):\n%s",
			got, len(evs), strings.Join(lines, "\n"))
	}
	t.Logf("then: exactly 20 new revisions, all Helm's, while the unrelated objects were relabelled %d times each", beats)

	t.Log("when: db-creds alone is edited (kubectl)")
	_, err = e2e.cluster.Kube.CoreV1().Secrets(ns).Patch(ctx, "db-creds", types.MergePatchType, []byte(`{"stringData":{"password":"by-hand"}}`), metav1.PatchOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, time.Minute, "a revision for the edit", func(ctx context.Context) (bool, string, error) {
		n := len(ownReplicaSets(t, ns, "web")) - before
		return n == 21, fmt.Sprintf("%d new ReplicaSets", n), nil
	}))
	expectEvents(t, ns, "Deployment", "web", trigger.ReasonStarted, "Secret/db-creds changed")
	t.Log("then: the trigger starts the 21st: it was following all along")
}

// A count/configmaps ResourceQuota leaves no room for the record: the edit of the ConfigMap still starts
// a revision, a Warning says why the record is not kept; once the quota is lifted the record is written,
// and the next edit starts a revision too.
func TestConfigStartsAQuotaLeavingNoRoomForTheRecordSwallowsNoEdit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-quota")
	startTriggerController(t, ns)
	_, err := e2e.cluster.PutConfigMap(ctx, ns, "app-config", pinV1)
	must(t, err)
	list, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	full := resource.MustParse(fmt.Sprint(len(list.Items)))
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": full}}}
	_, err = e2e.cluster.Kube.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, time.Minute, "the quota's usage counted", func(ctx context.Context) (bool, string, error) {
		q, err := e2e.cluster.Kube.CoreV1().ResourceQuotas(ns).Get(ctx, "configmaps", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		used := q.Status.Used["count/configmaps"]
		return used.Cmp(full) == 0, fmt.Sprintf("used %s", used.String()), nil
	}))
	_, err = e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PodTemplate("web", []string{"app-config"}, nil), nil)
	must(t, err)
	must(t, framework.Eventually(ctx, time.Minute, "web's first ReplicaSet", func(ctx context.Context) (bool, string, error) {
		return len(ownReplicaSets(t, ns, "web")) == 1, "none yet", nil
	}))
	must(t, e2e.cluster.Annotate(ctx, framework.DeploymentGVR, ns, "web", framework.ReloaderAuto))
	expectEvents(t, ns, "Deployment", "web", trigger.ReasonRecordNotKept, "exceeded quota", "count/configmaps")
	t.Logf("given: a count/configmaps quota of %s, all used; Deployment web opted in: its record cannot be written, and a Warning says why", full.String())

	t.Log("when: app-config is edited")
	must(t, e2e.cluster.EditConfigMap(ctx, ns, "app-config", pinV2))
	second := waitNewRevision(t, ns, "web", 2)
	t.Logf("then: revision %s starts (%s=%s): the edit is not swallowed", framework.RevisionOf(second), api.ConfigHashAnnotation, hashOf(second))

	t.Log("when: the quota is lifted")
	must(t, e2e.cluster.Kube.CoreV1().ResourceQuotas(ns).Delete(ctx, "configmaps", metav1.DeleteOptions{}))
	waitRecord(t, ns, "Deployment", "web", 2*time.Minute)
	t.Log("then: the record is written")

	t.Log("when: app-config is edited again")
	must(t, e2e.cluster.EditConfigMap(ctx, ns, "app-config", pinV3))
	third := waitNewRevision(t, ns, "web", 3)
	t.Logf("then: revision %s starts too", framework.RevisionOf(third))
}

// waitNewRevision waits for Deployment name to have n ReplicaSets, the newest carrying our annotation,
// and returns that one.
func waitNewRevision(t *testing.T, ns, name string, n int) *appsv1.ReplicaSet {
	t.Helper()
	var newest *appsv1.ReplicaSet
	must(t, framework.Eventually(context.Background(), time.Minute, fmt.Sprintf("%d ReplicaSets of %s", n, name), func(ctx context.Context) (bool, string, error) {
		rss := ownReplicaSets(t, ns, name)
		newest = nil
		for i := range rss {
			if newest == nil || revision.Number(rss[i].Annotations) > revision.Number(newest.Annotations) {
				newest = &rss[i]
			}
		}
		return len(rss) == n && newest != nil && hashOf(newest) != "", fmt.Sprintf("%d", len(rss)), nil
	}))
	return newest
}
