//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// pinnedHistoryTemplate is the write-up's pod template reading the static app-config (with the
// checksum annotation of data) and the static Secret app-env through envFrom.
func pinnedHistoryTemplate(data map[string]string) corev1.PodTemplateSpec {
	t := framework.PinnedTemplate("demo", []string{"app-config"}, data)
	t.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app-env"}}}}
	return t
}

// liveName is the snapshot name app-config's content data gets.
func liveName(t *testing.T, data map[string]string) string {
	t.Helper()
	name, err := pinning.SnapshotName(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config"}, Data: data})
	must(t, err)
	return name
}

func (s *historyStory) pinnedJSON() *history.History {
	s.t.Helper()
	var h history.History
	must(s.t, json.Unmarshal([]byte(s.succeed("history", "rollout/demo", "-n", s.ns, "-o", "json")), &h))
	return &h
}

// With zero-touch pinning every revision's pod template names app-config, but its pods read the
// snapshot the revision owns: history shows that snapshot per revision, diff compares the snapshots,
// and a change made in place without a template change shows as drift.
func TestHistoryAndDiffOfAPinnedRollout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "history-pinning")
	startPinningController(t, "Fail", ns)
	s := &historyStory{t: t, ns: ns}
	r := pinnedRollout{t: t, ns: ns}

	t.Log("given: app-config and app-env labelled for pinning, Rollout demo (3 replicas) reading both")
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	_, err := e2e.cluster.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "app-env", Labels: map[string]string{api.PinLabel: api.PinValue}},
		StringData: map[string]string{"TOKEN": "s3cr3t-token-value"},
	}, metav1.CreateOptions{})
	must(t, err)
	tmpl := pinnedHistoryTemplate(pinV1)
	must(t, e2e.cluster.CreateRollout(ctx, ns, "demo", framework.RolloutSpec{Replicas: 3, Template: &tmpl}))
	rs1 := r.current(pinV1, 3)
	s.waitStable(rs1)
	s1 := r.expectReads(rs1, pinV1)

	t.Log("when: app-config is changed in place (faulty) with the checksum annotation: the canary pauses")
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV2))
	must(t, e2e.cluster.SetRolloutTemplate(ctx, ns, "demo", pinnedHistoryTemplate(pinV2)))
	rs2 := r.current(pinV2, 1)
	s.waitPaused()
	s2 := r.expectReads(rs2, pinV2)

	t.Run("history shows the snapshot each revision's pods read", func(t *testing.T) {
		s := *s
		s.t = t
		table := s.succeed("history", "rollout/demo", "-n", ns)
		s.expectContains("revision 1", historyRow(table, 1), rs1.Name, "stable", "configmap/app-config -> "+s1+" (pinned)", "secret/app-env -> app-env-")
		s.expectContains("revision 2", historyRow(table, 2), rs2.Name, "canary", "configmap/app-config -> "+s2+" (pinned)", "secret/app-env -> app-env-")
		s.expectNotContains("the table", table, "DRIFT", "(not pinned yet)", "(not revisioned)", "s3cr3t", "faulty")
		h := s.pinnedJSON()
		for i, snap := range map[int]string{0: s2, 1: s1} {
			c := h.Revisions[i].Config[0]
			if !c.Pinned || c.Snapshot != snap || c.Name != "app-config" {
				t.Errorf("revision %d: config %+v, want app-config pinned to %s", h.Revisions[i].Revision, c, snap)
			}
		}
		if h.Drift != nil {
			t.Errorf("drift %+v while app-config holds the canary's content", h.Drift)
		}
	})

	t.Run("diff compares the two revisions' snapshots", func(t *testing.T) {
		s := *s
		s.t = t
		out := s.succeed("diff", "rollout/demo", "-n", ns)
		s.expectContains("the diff", out,
			"revision 1 (ReplicaSet "+rs1.Name+", stable) -> revision 2 (ReplicaSet "+rs2.Name+", canary)",
			"ConfigMap app-config (pinned): "+s1+" -> "+s2,
			`-{"general": {"projectName": "demo service"}}`,
			`+{"general": {"projectName": "demo service", "faulty": true}}`,
			"Unchanged: secret/app-env-", "(snapshot of app-env, both sides)")
		s.expectNotContains("the diff", out, "Unchanged: configmap/app-config", "No config differences", "s3cr3t")
	})

	t.Log("when: app-config is changed in place again, without a change to the pod template (kubectl edit)")
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV3))
	v3 := liveName(t, pinV3)

	t.Run("history shows the drift; the pods keep their snapshots", func(t *testing.T) {
		s := *s
		s.t = t
		table := s.succeed("history", "rollout/demo", "-n", ns)
		s.expectContains("the table", table, "DRIFT: configmap/app-config has changed since revision 2 was created: no revision runs its content yet (it would be snapshot "+v3+"; revision 2's pods read "+s2+")")
		h := s.pinnedJSON()
		if len(h.Drift) != 1 || h.Drift[0].Name != "app-config" || h.Drift[0].Revision != 2 || h.Drift[0].Snapshot != s2 || h.Drift[0].Live != v3 || h.Drift[0].LiveRevisions != nil {
			t.Errorf("drift = %+v, want app-config: revision 2 reads %s, live %s", h.Drift, s2, v3)
		}
		r := pinnedRollout{t: t, ns: ns}
		r.expectReads(rs2, pinV2)
		r.expectReads(rs1, pinV1)
	})

	t.Run("diff live shows what a new revision would get", func(t *testing.T) {
		s := *s
		s.t = t
		out := s.succeed("diff", "rollout/demo", "live", "-n", ns)
		s.expectContains("the diff", out,
			"revision 2 (ReplicaSet "+rs2.Name+", canary) -> live",
			"ConfigMap app-config (pinned): "+s2+" -> app-config (live)",
			`+{"general": {"projectName": "demo service v3"}}`,
			"-> app-env (live) (same content)")
		out = s.succeed("diff", "rollout/demo", "1", "live", "-n", ns)
		s.expectContains("the diff from revision 1", out, "ConfigMap app-config (pinned): "+s1+" -> app-config (live)")
	})

	t.Log("when: app-config is set back to revision 1's content, in place")
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))

	t.Run("the drift names the revision that has that content", func(t *testing.T) {
		s := *s
		s.t = t
		table := s.succeed("history", "rollout/demo", "-n", ns)
		s.expectContains("the table", table, "DRIFT: configmap/app-config holds revision 1's content ("+s1+"), not the current revision 2's ("+s2+")")
	})

	t.Run("live is the last argument, after at most one revision", func(t *testing.T) {
		s := *s
		s.t = t
		for _, args := range [][]string{{"1", "2", "live"}, {"live", "1"}} {
			r := s.run(append([]string{"diff", "rollout/demo", "-n", ns}, args...)...)
			if r.Code != 2 {
				t.Errorf("diff %s: exit %d, want 2 (usage)", strings.Join(args, " "), r.Code)
			}
		}
	})
}

// The demo's second story, as `make demo` runs it: the controller started by the walkthrough's helper
// (its webhook configuration and certificate deleted at the end), the story's assertions, and
// history and diff where the demo shows them.
func TestZeroTouchWalkthrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := story(t, "zero-touch", nil)
	name := "walkthrough-" + s.Namespace
	ctrl, err := walkthrough.StartPinningController(ctx, e2e.cluster, e2e.bin, name, s.Namespace)
	must(t, err)
	t.Cleanup(func() {
		must(t, ctrl.Stop(ctx))
		if _, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("webhook configuration %s left behind (err %v)", name, err)
		}
		if _, err := e2e.cluster.Kube.CoreV1().Secrets(walkthrough.LeaseNamespace).Get(ctx, name+"-webhook-tls", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("certificate Secret %s-webhook-tls left behind (err %v)", name, err)
		}
	})
	h := &historyStory{t: t, ns: s.Namespace}
	s.AfterStep = func(ctx context.Context, step int) error {
		switch step {
		case 4:
			h.expectContains("history after the abort", h.succeed("history", "rollout/demo", "-n", s.Namespace), "canary (aborted)", "(pinned)")
			h.expectContains("diff after the abort", h.succeed("diff", "rollout/demo", "-n", s.Namespace), `+{"general": {"projectName": "demo service", "faulty": true}}`)
		case 5:
			h.expectContains("history after the in-place fix", h.succeed("history", "rollout/demo", "-n", s.Namespace), "DRIFT: configmap/app-config has changed since revision 2")
			h.expectContains("diff 1 live", h.succeed("diff", "rollout/demo", "1", "live", "-n", s.Namespace), `+{"general": {"projectName": "demo service v3"}}`)
		}
		return nil
	}
	must(t, s.ZeroTouch(ctx))
}
