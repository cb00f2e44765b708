package walkthrough

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// ConfigStarts is the write-up's story with nothing but the ConfigMap edited: Rollout demo carries
// Reloader's annotation reloader.stakater.com/auto and no checksum; app-config, labelled for pinning,
// is edited in place, and each edit starts the canary by itself: the controller (running with
// -pinning -reloader-annotations, StartTriggerController) writes configmap-attacher.io/config-hash on
// the pod template.
// s.Attacher is not used.
//
// Steps: deploy; a faulty edit starts a canary that pauses; a spot replacement of a stable pod reads
// the OLD content; abort; the edit reverted: back to the stable revision, no new ReplicaSet; a fixed
// edit, promoted; revisionHistoryLimit 0 prunes the old revisions and the garbage collector their
// snapshots.
func (s *Story) ConfigStarts(ctx context.Context) error {
	var v1, v2, v3 revision
	return s.runPinned(ctx,
		step{fmt.Sprintf("deploy: ConfigMap %s (labelled for pinning) and Rollout %s (%d replicas) reading it, annotated %s: \"true\", no checksum",
			PinnedConfigMap, s.Rollout, replicas, api.ReloaderAuto), func(ctx context.Context) (err error) {
			v1, err = s.startTriggered(ctx)
			return err
		}},
		step{"edit app-config in place (faulty), nothing else: the controller writes config-hash on the pod template and a canary starts and pauses",
			func(ctx context.Context) (err error) {
				if v2, err = s.editedCanary(ctx, 1, v1); err != nil {
					return err
				}
				return s.expectReads(ctx, v1.RS, v1)
			}},
		s.pinnedSpotReplacement(&v1),
		step{"abort the canary", func(ctx context.Context) error {
			if err := s.abortCanary(ctx, v1, v2); err != nil {
				return err
			}
			return s.expectSnapshot(ctx, v2)
		}},
		step{"revert app-config to its first content: the Rollout goes back to its stable revision", func(ctx context.Context) error {
			return s.revertTo(ctx, v1, v2)
		}},
		step{"edit app-config again (fixed): a new canary; promote it", func(ctx context.Context) (err error) {
			if v3, err = s.editedCanary(ctx, 2, v1, v2); err != nil {
				return err
			}
			return s.promotePinned(ctx, v3, v1)
		}},
		step{"revisionHistoryLimit: 0 prunes revisions 1 and 2; their snapshots go with them", func(ctx context.Context) error {
			return s.pruneOld(ctx, v3, v1, v2)
		}},
	)
}

// startTriggered creates the namespace with pinning enabled, app-config and the Rollout opted in with
// Reloader's annotation, and waits until the first revision runs everywhere, reading its snapshot.
func (s *Story) startTriggered(ctx context.Context) (revision, error) {
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
	tmpl := framework.PodTemplate(s.Rollout, []string{PinnedConfigMap}, nil)
	spec := framework.RolloutSpec{Replicas: replicas, Template: &tmpl, Annotations: framework.ReloaderAuto}
	if err := s.C.CreateRollout(ctx, s.Namespace, s.Rollout, spec); err != nil {
		return revision{}, err
	}
	s.say("kubectl apply: ConfigMap %s (label %s: %q) and Rollout %s (annotation %s: \"true\") mounting it at %s",
		PinnedConfigMap, api.PinLabel, api.PinValue, s.Rollout, api.ReloaderAuto, framework.MountPath)
	rs, err := s.waitRevision(ctx, "(the first)", replicas, func(*appsv1.ReplicaSet) bool { return true })
	if err != nil {
		return revision{}, err
	}
	if err := s.waitStable(ctx, rs); err != nil {
		return revision{}, err
	}
	return s.pinnedRevision(ctx, rs, data)
}

// editedCanary edits app-config in place to content i, and nothing else, then waits for the canary
// the controller starts: a ReplicaSet none of before, whose template carries our annotation, paused
// at one pod.
func (s *Story) editedCanary(ctx context.Context, i int, stable revision, before ...revision) (revision, error) {
	data := PinnedConfigs[i]
	if err := s.C.EditConfigMap(ctx, s.Namespace, PinnedConfigMap, data); err != nil {
		return revision{}, err
	}
	s.say("kubectl edit configmap %s   (only the ConfigMap: the Rollout is not touched)", PinnedConfigMap)
	seen := []types.UID{stable.RS.UID}
	for _, b := range before {
		seen = append(seen, b.RS.UID)
	}
	rs, err := s.waitRevision(ctx, "started by the edit", 1, func(rs *appsv1.ReplicaSet) bool {
		return !slices.Contains(seen, rs.UID) && rs.Spec.Template.Annotations[api.ConfigHashAnnotation] != ""
	})
	if err != nil {
		return revision{}, err
	}
	s.say("✓ the controller wrote %s: %s on the Rollout's pod template: Argo Rollouts made ReplicaSet %s",
		api.ConfigHashAnnotation, rs.Spec.Template.Annotations[api.ConfigHashAnnotation], rs.Name)
	if err := s.waitCanaryPaused(ctx, rs, stable); err != nil {
		return revision{}, err
	}
	return s.pinnedRevision(ctx, rs, data)
}

// revertTo edits app-config back to to's content: the controller removes its annotation (to was made
// before the Rollout had one), the template equals to's again, and Argo Rollouts goes back to it
// without a new ReplicaSet.
func (s *Story) revertTo(ctx context.Context, to revision, others ...revision) error {
	if err := s.C.EditConfigMap(ctx, s.Namespace, PinnedConfigMap, to.Data); err != nil {
		return err
	}
	s.say("kubectl edit configmap %s   (back to the first content)", PinnedConfigMap)
	rs, err := s.waitRevision(ctx, "back to "+to.RS.Name, replicas, func(rs *appsv1.ReplicaSet) bool { return rs.UID == to.RS.UID })
	if err != nil {
		return err
	}
	if _, has := rs.Spec.Template.Annotations[api.ConfigHashAnnotation]; has {
		return fmt.Errorf("ReplicaSet %s carries %s: the first revision had none", rs.Name, api.ConfigHashAnnotation)
	}
	if err := s.waitStable(ctx, rs); err != nil {
		return err
	}
	res, err := s.C.Resolve(ctx, s.Namespace, s.Rollout)
	if err != nil {
		return err
	}
	if len(res.Owned) != 1+len(others) {
		return fmt.Errorf("%d ReplicaSets after the revert, want %d: the revert must reuse %s", len(res.Owned), 1+len(others), to.RS.Name)
	}
	s.say("✓ the controller removed %s: the template is revision 1's again, and Argo Rollouts went back to ReplicaSet %s, no new one",
		api.ConfigHashAnnotation, to.RS.Name)
	return s.expectReads(ctx, rs, to)
}

// promotePinned promotes the paused canary next and waits until it runs every replica, the old stable
// none.
func (s *Story) promotePinned(ctx context.Context, next, old revision) error {
	if err := s.C.PromotePaused(ctx, s.Wait, s.Namespace, s.Rollout); err != nil {
		return err
	}
	s.say("kubectl argo rollouts promote %s", s.Rollout)
	if _, err := s.waitRevision(ctx, next.RS.Name, replicas, func(rs *appsv1.ReplicaSet) bool { return rs.UID == next.RS.UID }); err != nil {
		return err
	}
	if err := s.waitStable(ctx, next.RS); err != nil {
		return err
	}
	if err := s.C.WaitPods(ctx, s.Wait, old.RS, 0); err != nil {
		return err
	}
	s.say("✓ all %d pods run ReplicaSet %s", replicas, next.RS.Name)
	return s.expectReads(ctx, next.RS, next)
}

// pruneOld sets revisionHistoryLimit to 0: Argo Rollouts deletes the old ReplicaSets and the garbage
// collector their snapshots; app-config itself is owned by nothing.
func (s *Story) pruneOld(ctx context.Context, current revision, old ...revision) error {
	if err := s.C.SetRevisionHistoryLimit(ctx, s.Namespace, s.Rollout, 0); err != nil {
		return err
	}
	s.say("kubectl patch rollout %s: revisionHistoryLimit: 0", s.Rollout)
	for _, o := range old {
		if err := s.C.WaitReplicaSetGone(ctx, s.Wait, s.Namespace, o.RS.Name); err != nil {
			return err
		}
		if err := s.C.WaitGone(ctx, s.Wait, s.Namespace, refs.ConfigMap, o.ConfigMap); err != nil {
			return err
		}
		s.say("✓ ReplicaSet %s pruned, and its snapshot %s with it", o.RS.Name, o.ConfigMap)
	}
	cm, err := s.C.Kube.CoreV1().ConfigMaps(s.Namespace).Get(ctx, PinnedConfigMap, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(cm.OwnerReferences) > 0 || len(cm.Finalizers) > 0 {
		return fmt.Errorf("ConfigMap %s got owners %v and finalizers %v: the user's object must stay untouched", PinnedConfigMap, cm.OwnerReferences, cm.Finalizers)
	}
	return s.expectReads(ctx, current.RS, current)
}
