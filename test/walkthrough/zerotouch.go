package walkthrough

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// PinnedConfigMap is the one static ConfigMap of the zero-touch story.
const PinnedConfigMap = "app-config"

// PinnedConfigs are the contents app-config is changed to in place, in order: the first, the faulty
// one (the canary), the fixed one (changed without a template change: drift). One line each, so a
// tree shows them whole.
var PinnedConfigs = []map[string]string{
	{"configuration.json": `{"general": {"projectName": "demo service"}}`},
	{"configuration.json": `{"general": {"projectName": "demo service", "faulty": true}}`},
	{"configuration.json": `{"general": {"projectName": "demo service v3"}}`},
}

// ZeroTouch is the write-up's story with zero-touch pinning: ONE static ConfigMap, app-config,
// changed in place with Helm's checksum annotation, no renaming and no Job. The controller must run
// with -pinning for s.Namespace (StartPinningController): every revision gets an immutable snapshot of
// app-config, and its webhook points each revision's pods at theirs. s.Attacher is not used.
//
// Steps: deploy; a faulty change pauses as a canary; a spot replacement of a stable pod reads the OLD
// content; abort; app-config fixed in place without the checksum (drift: nothing rolls out).
func (s *Story) ZeroTouch(ctx context.Context) error {
	var v1, v2 revision
	return s.runPinned(ctx,
		step{fmt.Sprintf("deploy: a static ConfigMap %s, labelled for pinning, and Rollout %s (%d replicas) reading it by name",
			PinnedConfigMap, s.Rollout, replicas), func(ctx context.Context) (err error) {
			v1, err = s.startPinned(ctx)
			return err
		}},
		step{"change app-config in place (faulty) and the checksum annotation: a new revision, a new snapshot; the canary pauses",
			func(ctx context.Context) (err error) {
				if v2, err = s.pinnedCanary(ctx, 1, v1); err != nil {
					return err
				}
				return s.expectReads(ctx, v1.RS, v1)
			}},
		s.pinnedSpotReplacement(&v1),
		step{"abort the canary", func(ctx context.Context) error {
			if err := s.abortCanary(ctx, v1, v2); err != nil {
				return err
			}
			// The aborted revision is kept for rollback, and so is its snapshot.
			if err := s.expectSnapshot(ctx, v2); err != nil {
				return err
			}
			s.say("✓ snapshot %s stays with ReplicaSet %s (kept for rollback, 0 pods)", v2.ConfigMap, v2.RS.Name)
			return nil
		}},
		step{"fix app-config in place, forgetting the checksum annotation: nothing rolls out", func(ctx context.Context) error {
			if err := s.C.PutPinnedConfigMap(ctx, s.Namespace, PinnedConfigMap, PinnedConfigs[2]); err != nil {
				return err
			}
			s.say("kubectl edit configmap %s   (fixed content; the pod template is unchanged)", PinnedConfigMap)
			// Give a wrong controller time to do something wrong: no new revision, no new snapshot.
			time.Sleep(2 * time.Second)
			res, err := s.C.Resolve(ctx, s.Namespace, s.Rollout)
			if err != nil {
				return err
			}
			if len(res.Owned) != 2 {
				return fmt.Errorf("%d ReplicaSets after an in-place change without a template change, want 2", len(res.Owned))
			}
			snaps, err := s.C.Snapshots(ctx, s.Namespace, PinnedConfigMap)
			if err != nil {
				return err
			}
			if len(snaps) != 2 {
				return fmt.Errorf("%d snapshots of %s after an in-place change without a template change, want 2", len(snaps), PinnedConfigMap)
			}
			if err := s.expectReads(ctx, v1.RS, v1); err != nil {
				return err
			}
			s.say("✓ no new revision and no new snapshot: the pods keep theirs until the pod template changes")
			return nil
		}},
	)
}

// startPinned creates the namespace with pinning enabled, app-config and the Rollout, and waits until
// the first revision runs everywhere, reading its snapshot.
func (s *Story) startPinned(ctx context.Context) (revision, error) {
	if err := s.C.CreateNamespace(ctx, s.Namespace); err != nil {
		return revision{}, err
	}
	if err := s.C.EnablePinning(ctx, s.Namespace); err != nil {
		return revision{}, err
	}
	s.say("kubectl label namespace %s %s=%s", s.Namespace, api.PinningNamespaceLabel, api.PinningEnabled)
	data := PinnedConfigs[0]
	if err := s.C.PutPinnedConfigMap(ctx, s.Namespace, PinnedConfigMap, data); err != nil {
		return revision{}, err
	}
	tmpl := framework.PinnedTemplate(s.Rollout, []string{PinnedConfigMap}, data)
	if err := s.C.CreateRollout(ctx, s.Namespace, s.Rollout, framework.RolloutSpec{Replicas: replicas, Template: &tmpl}); err != nil {
		return revision{}, err
	}
	s.say("kubectl apply: ConfigMap %s (label %s: %q) and Rollout %s mounting it at %s, pod template annotation checksum/config: %.8s…",
		PinnedConfigMap, api.PinLabel, api.PinValue, s.Rollout, framework.MountPath, framework.Checksum(data))
	rs, err := s.waitChecksum(ctx, data, replicas)
	if err != nil {
		return revision{}, err
	}
	if err := s.waitStable(ctx, rs); err != nil {
		return revision{}, err
	}
	return s.pinnedRevision(ctx, rs, data)
}

// pinnedCanary changes app-config in place to content i with its checksum, and waits for the canary
// pause.
func (s *Story) pinnedCanary(ctx context.Context, i int, stable revision) (revision, error) {
	data := PinnedConfigs[i]
	if err := s.C.PutPinnedConfigMap(ctx, s.Namespace, PinnedConfigMap, data); err != nil {
		return revision{}, err
	}
	if err := s.C.SetRolloutTemplate(ctx, s.Namespace, s.Rollout, framework.PinnedTemplate(s.Rollout, []string{PinnedConfigMap}, data)); err != nil {
		return revision{}, err
	}
	s.say("kubectl apply: ConfigMap %s changed in place; checksum/config: %.8s…", PinnedConfigMap, framework.Checksum(data))
	rs, err := s.waitChecksum(ctx, data, 1)
	if err != nil {
		return revision{}, err
	}
	if err := s.waitCanaryPaused(ctx, rs, stable); err != nil {
		return revision{}, err
	}
	return s.pinnedRevision(ctx, rs, data)
}

// pinnedRevision finds the snapshot rs owns and checks its pods read it and it holds data.
func (s *Story) pinnedRevision(ctx context.Context, rs *appsv1.ReplicaSet, data map[string]string) (revision, error) {
	var r revision
	err := framework.Eventually(ctx, s.Wait, "the snapshot of "+PinnedConfigMap+" owned by ReplicaSet "+rs.Name, func(ctx context.Context) (bool, string, error) {
		snap, err := s.C.SnapshotOf(ctx, s.Namespace, PinnedConfigMap, rs.UID)
		if err != nil {
			return false, err.Error(), nil
		}
		r = revision{ConfigMap: snap.Name, Data: data, RS: rs}
		return true, "", nil
	})
	if err != nil {
		return revision{}, err
	}
	if err := s.expectSnapshot(ctx, r); err != nil {
		return revision{}, err
	}
	s.say("✓ ReplicaSet %s owns ConfigMap %s: an immutable snapshot of %s as it was when the revision was created", rs.Name, r.ConfigMap, PinnedConfigMap)
	return r, s.expectReads(ctx, rs, r)
}

// expectSnapshot checks r's snapshot is immutable, names app-config, and is owned by r's ReplicaSet.
func (s *Story) expectSnapshot(ctx context.Context, r revision) error {
	snap, err := s.C.SnapshotOf(ctx, s.Namespace, PinnedConfigMap, r.RS.UID)
	if err != nil {
		return err
	}
	if snap.Name != r.ConfigMap || snap.Immutable == nil || !*snap.Immutable {
		return fmt.Errorf("ReplicaSet %s's snapshot is %s (immutable %v), want immutable %s", r.RS.Name, snap.Name, snap.Immutable, r.ConfigMap)
	}
	return nil
}

// waitChecksum waits until the Rollout's current ReplicaSet runs the template of data (its checksum
// annotation: every revision references app-config by the same name) with `ready` ready pods.
func (s *Story) waitChecksum(ctx context.Context, data map[string]string, ready int) (*appsv1.ReplicaSet, error) {
	sum := framework.Checksum(data)
	return s.waitRevision(ctx, fmt.Sprintf("with checksum %.8s", sum), ready, func(rs *appsv1.ReplicaSet) bool {
		return rs.Spec.Template.Annotations["checksum/config"] == sum
	})
}

// runPinned is run with PinnedTree after each step.
func (s *Story) runPinned(ctx context.Context, steps ...step) error {
	for _, st := range steps {
		s.stepf("%s", st.title)
		if err := st.do(ctx); err != nil {
			return err
		}
		t, err := PinnedTree(ctx, s.C, s.Namespace, s.Rollout)
		if err != nil {
			return err
		}
		fmt.Fprint(s.Out, t)
		if s.AfterStep != nil {
			if err := s.AfterStep(ctx, s.step); err != nil {
				return err
			}
		}
	}
	return nil
}

// PinnedTree draws each ReplicaSet of the Rollout with the snapshots it owns and what its pods read,
// then the pinned objects themselves: owned by nothing, and read by no pod of a pinned revision.
func PinnedTree(ctx context.Context, c *framework.Cluster, ns, name string) (string, error) {
	res, err := c.Resolve(ctx, ns, name)
	if err != nil {
		return "", err
	}
	cms, err := c.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	content := map[string]string{}
	owned := map[string][]string{} // ReplicaSet uid -> snapshots
	var pinned []string
	for _, cm := range cms.Items {
		content[cm.Name] = describe(cm.Data)
		switch {
		case cm.Labels[api.SnapshotLabel] == api.SnapshotValue:
			for _, o := range cm.OwnerReferences {
				owned[string(o.UID)] = append(owned[string(o.UID)], cm.Name)
			}
		case api.Pinned(cm.Labels):
			pinned = append(pinned, cm.Name)
		}
	}
	direct := map[string]int{} // pinned object -> pods reading it directly
	var b strings.Builder
	writeRollout(&b, name, res)
	for i, rs := range res.Owned {
		indent := writeReplicaSet(&b, res, i)
		podList, err := c.PodsOf(ctx, rs)
		if err != nil {
			return "", err
		}
		reads := map[string]int{}
		for i := range podList {
			for _, n := range framework.ReadsConfigMaps(&podList[i]) {
				reads[n]++
			}
		}
		var lines []string
		if h, ok := rs.Spec.Template.Annotations[api.ConfigHashAnnotation]; ok {
			lines = append(lines, fmt.Sprintf("pod template: %s=%s", api.ConfigHashAnnotation, h))
		}
		snaps := owned[string(rs.UID)]
		sort.Strings(snaps)
		for _, sn := range snaps {
			lines = append(lines, fmt.Sprintf("ConfigMap %s  snapshot, read by %s: %s", sn, podCount(reads[sn]), content[sn]))
			delete(reads, sn)
		}
		sorted := len(lines)
		for n, k := range reads {
			lines = append(lines, fmt.Sprintf("%s read ConfigMap %s directly", podCount(k), n))
			direct[n] += k
		}
		sort.Strings(lines[sorted:])
		for j, l := range lines {
			leaf := "├─"
			if j == len(lines)-1 {
				leaf = "└─"
			}
			fmt.Fprintf(&b, "%s %s %s\n", indent, leaf, l)
		}
	}
	sort.Strings(pinned)
	for _, p := range pinned {
		fmt.Fprintf(&b, "ConfigMap %s (pinned, owned by nothing, read directly by %s): %s\n", p, podCount(direct[p]), content[p])
	}
	return b.String(), nil
}

func podCount(n int) string {
	switch n {
	case 0:
		return "no pod"
	case 1:
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// describe shows a ConfigMap's content on one line: its one short value, else its keys.
func describe(data map[string]string) string {
	if len(data) == 1 {
		for _, v := range data {
			if len(v) <= 80 && !strings.Contains(v, "\n") {
				return v
			}
		}
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Sprintf("%d keys (%s)", len(keys), strings.Join(keys, ", "))
}

// pinnedSpotReplacement is the step both pinned stories share: a stable pod deleted during the pause
// comes back reading the content of its revision, *v1 (set by an earlier step), not the live one.
func (s *Story) pinnedSpotReplacement(v1 *revision) step {
	return step{"a spot node is replaced: delete a stable pod during the pause", func(ctx context.Context) error {
		if err := s.spotReplacement(ctx, *v1); err != nil {
			return err
		}
		s.say("✓ the OLD content, although ConfigMap %s itself now holds the faulty one: the outage stays in the canary", PinnedConfigMap)
		return nil
	}}
}
