//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// A release installed before configmap-attacher: its chart knows nothing of it and its ConfigMap
// app-config is plain. The first upgrade with the post-renderer renames it.

func installPlainRelease(t *testing.T, ns string) (*helmStory, revisionOf) {
	t.Helper()
	h := helmCLI(t)
	s := &helmStory{t: t, ns: ns, rollout: "app"}
	t.Log("given: the plain chart installed without render: its Rollout mounts ConfigMap app-config (no label, no keep)")
	helmRun(t, h, "install", "plain", testdataPath("plain-chart"), "-n", ns, "--set-string", "config.greeting=hello-0")
	old := s.waitNewRevision(nil, 3)
	if old.cm != "app-config" {
		t.Fatalf("the installed Rollout mounts %s, want app-config", old.cm)
	}
	return s, old
}

// upgradeWithRender is the first upgrade with the post-renderer and a config change: a canary starts.
func upgradeWithRender(t *testing.T, s *helmStory, old revisionOf) revisionOf {
	t.Helper()
	t.Log("when: the first helm upgrade with the post-renderer and a config change")
	helmRun(t, helmCLI(t), append([]string{"upgrade", "plain", testdataPath("plain-chart"), "-n", s.ns,
		"--set-string", "config.greeting=hello-1"}, postRenderer(s.ns, "-select=configmap/app-config")...)...)
	cur := s.waitNewRevision(old.rs, 1)
	must(t, s.waitPaused())
	return cur
}

// Negative control: without adopt, that upgrade deletes app-config while the stable pods mount it,
// the controller running or not (nothing opted app-config in).
func TestFirstUpgradeWithRenderWithoutAdoptDeletesTheStableConfig(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "e2e-adopt-without")
	s, old := installPlainRelease(t, ns)
	startController(t, nil, ns)
	upgradeWithRender(t, s, old)
	_, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), old.cm, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("want %s deleted by the upgrade (what adopt prevents), got err=%v", old.cm, err)
	}
	t.Logf("then: Helm deleted %s while the stable ReplicaSet %s runs pods mounting it", old.cm, old.rs.Name)
}

func TestAdoptThenFirstUpgradeWithRender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-adopt")
	s, old := installPlainRelease(t, ns)
	adoptArgs := []string{"adopt", "rollout/app", "-n", ns}

	t.Log("when: adopt -dry-run")
	r := e2e.bin.Run(ctx, nil, append(adoptArgs, "-dry-run")...)
	want := fmt.Sprintf(`ConfigMap %[1]s/app-config: add label configmap-attacher.io/revisioned=true
ConfigMap %[1]s/app-config: add annotation helm.sh/resource-policy=keep
ConfigMap %[1]s/app-config: add ownerReference to ReplicaSet %[2]s (revision 1) (uid %[3]s)
would adopt 1 objects (3 changes)
`, ns, old.rs.Name, old.rs.UID)
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("adopt -dry-run: %s\nwant stdout:\n%s", r, want)
	}
	cm, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "app-config", metav1.GetOptions{})
	must(t, err)
	if len(cm.OwnerReferences) > 0 || cm.Labels[api.RevisionedLabel] != "" || cm.Annotations["helm.sh/resource-policy"] != "" {
		t.Fatalf("then: the dry run changed app-config: labels %v annotations %v owners %v", cm.Labels, cm.Annotations, cm.OwnerReferences)
	}
	t.Log("then: it prints the three changes and makes none")

	t.Log("when: adopt")
	r = e2e.bin.Run(ctx, nil, adoptArgs...)
	if want := want[:len(want)-len("would adopt 1 objects (3 changes)\n")] + "adopted 1 objects (3 changes)\n"; r.Code != 0 || r.Stdout != want {
		t.Fatalf("adopt: %s\nwant stdout:\n%s", r, want)
	}
	cm, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "app-config", metav1.GetOptions{})
	must(t, err)
	no := false
	wantOwner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: old.rs.Name, UID: old.rs.UID, Controller: &no}
	if len(cm.OwnerReferences) != 1 || !reflect.DeepEqual(cm.OwnerReferences[0], wantOwner) ||
		cm.Labels[api.RevisionedLabel] != "true" || cm.Annotations["helm.sh/resource-policy"] != "keep" ||
		cm.Annotations["meta.helm.sh/release-name"] != "plain" {
		t.Fatalf("then: app-config has labels %v annotations %v owners %v; want the opt-in label, keep, Helm's own annotations and one ownerReference %+v",
			cm.Labels, cm.Annotations, cm.OwnerReferences, wantOwner)
	}
	t.Logf("then: app-config is opted in, kept, and owned by ReplicaSet %s (controller: false)", old.rs.Name)

	t.Log("when: adopt again")
	if r = e2e.bin.Run(ctx, nil, adoptArgs...); r.Code != 0 || r.Stdout != "adopted 0 objects (0 changes)\n" {
		t.Fatalf("adopt again: %s", r)
	}
	t.Log("then: nothing changes")

	startController(t, nil, ns)
	cur := upgradeWithRender(t, s, old)
	if cur.cm == old.cm {
		t.Fatalf("the canary mounts %s: the post-renderer did not rename it", cur.cm)
	}
	expectKept(t, ns, cur.cm)
	stillThere(t, ns, refs.ConfigMap, old.cm, "the stable ReplicaSet "+old.rs.Name+" runs pods mounting it")
	t.Logf("then: Helm left %s (keep) to the stable pods; the canary mounts %s", old.cm, cur.cm)
	s.expectEveryReplicaSetHasItsConfig()
	s.spotReplacement(old, cur)

	t.Logf("when: the canary is promoted and ReplicaSet %s deleted", old.rs.Name)
	promotePaused(t, ns, s.rollout)
	must(t, e2e.cluster.WaitPods(ctx, helmWait, old.rs, 0))
	deleteBackground(ctx, t, e2e.cluster.Kube.AppsV1().ReplicaSets(ns).Delete, old.rs.Name)
	start := time.Now()
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, old.cm))
	stillThere(t, ns, refs.ConfigMap, cur.cm, "the current ReplicaSet uses it")
	t.Logf("then: the garbage collector deletes %s with it (%s); %s stays", old.cm, time.Since(start).Round(100*time.Millisecond), cur.cm)
}
