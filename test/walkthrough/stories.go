package walkthrough

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

const replicas = 3

// start deploys the first revision and waits until it runs everywhere, attached.
func (s *Story) start(ctx context.Context, spec framework.RolloutSpec) (revision, error) {
	if err := s.C.CreateNamespace(ctx, s.Namespace); err != nil {
		return revision{}, err
	}
	spec.Replicas = replicas
	cm, err := s.deploy(ctx, 0, spec)
	if err != nil {
		return revision{}, err
	}
	rs, err := s.waitCurrent(ctx, cm, replicas)
	if err != nil {
		return revision{}, err
	}
	if err := s.waitStable(ctx, rs); err != nil {
		return revision{}, err
	}
	if err := s.deployerDone(ctx, cm, rs); err != nil {
		return revision{}, err
	}
	if err := s.expectAttached(ctx, cm, rs); err != nil {
		return revision{}, err
	}
	r := revision{ConfigMap: cm, Data: configs[0], RS: rs}
	return r, s.expectReads(ctx, rs, r)
}

// canary deploys config revision i and waits for the canary pause: one pod on the new ReplicaSet.
func (s *Story) canary(ctx context.Context, i int, stable revision) (revision, error) {
	cm, err := s.deploy(ctx, i, framework.RolloutSpec{})
	if err != nil {
		return revision{}, err
	}
	rs, err := s.waitCurrent(ctx, cm, 1)
	if err != nil {
		return revision{}, err
	}
	if err := s.waitCanaryPaused(ctx, rs, stable); err != nil {
		return revision{}, err
	}
	if err := s.expectCanaryAttached(ctx, cm, rs); err != nil {
		return revision{}, err
	}
	if err := s.expectAttached(ctx, stable.ConfigMap, stable.RS); err != nil {
		return revision{}, fmt.Errorf("the previous revision's config lost its owner: %w", err)
	}
	return revision{ConfigMap: cm, Data: configs[i], RS: rs}, nil
}

// promote continues the paused canary and waits until the new revision runs everywhere.
func (s *Story) promote(ctx context.Context, next revision, old ...revision) error {
	if err := s.C.PromotePaused(ctx, s.Wait, s.Namespace, s.Rollout); err != nil {
		return err
	}
	s.say("kubectl argo rollouts promote %s", s.Rollout)
	if _, err := s.waitCurrent(ctx, next.ConfigMap, replicas); err != nil {
		return err
	}
	if err := s.waitStable(ctx, next.RS); err != nil {
		return err
	}
	for _, o := range old {
		if err := s.C.WaitPods(ctx, s.Wait, o.RS, 0); err != nil {
			return err
		}
	}
	s.say("✓ all %d pods run ReplicaSet %s", replicas, next.RS.Name)
	if s.Deployer == nil {
		return nil
	}
	if err := s.deployerDone(ctx, next.ConfigMap, next.RS); err != nil {
		return err
	}
	return s.expectAttached(ctx, next.ConfigMap, next.RS)
}

// step is one numbered step of a story; its tree is drawn after it.
type step struct {
	title string
	do    func(ctx context.Context) error
}

func (s *Story) run(ctx context.Context, steps ...step) error {
	for _, st := range steps {
		s.stepf("%s", st.title)
		if err := st.do(ctx); err != nil {
			return err
		}
		if err := s.showTree(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Walkthrough is the write-up, step by step.
func (s *Story) Walkthrough(ctx context.Context) error {
	var v1, v2, v3 revision
	return s.run(ctx,
		step{fmt.Sprintf("deploy the chart: Rollout %s (%d replicas) with a revisioned ConfigMap", s.Rollout, replicas),
			func(ctx context.Context) (err error) {
				v1, err = s.start(ctx, framework.RolloutSpec{})
				return err
			}},
		step{"change the config: a new ReplicaSet and a new ConfigMap; the canary pauses", func(ctx context.Context) (err error) {
			if v2, err = s.canary(ctx, 1, v1); err != nil {
				return err
			}
			if err := s.expectMounts(ctx, v1.RS, v1.ConfigMap); err != nil {
				return err
			}
			return s.expectMounts(ctx, v2.RS, v2.ConfigMap)
		}},
		step{"a spot node is replaced: delete an old pod during the pause", func(ctx context.Context) error {
			return s.spotReplacement(ctx, v1)
		}},
		step{"promote the Rollout", func(ctx context.Context) error {
			return s.promote(ctx, v2, v1)
		}},
		step{"change the config again", func(ctx context.Context) (err error) {
			v3, err = s.canary(ctx, 2, v2)
			return err
		}},
		step{"promote the Rollout", func(ctx context.Context) error {
			return s.promote(ctx, v3, v2)
		}},
		step{"garbage collection: delete the two old ReplicaSets", func(ctx context.Context) error {
			if err := s.listConfigMaps(ctx); err != nil {
				return err
			}
			if err := s.deleteReplicaSets(ctx, v1.RS, v2.RS); err != nil {
				return err
			}
			for _, old := range []revision{v1, v2} {
				if err := s.expectGarbageCollected(ctx, old.ConfigMap); err != nil {
					return err
				}
			}
			if err := s.expectExists(ctx, v3.ConfigMap); err != nil {
				return err
			}
			if err := s.expectAttached(ctx, v3.ConfigMap, v3.RS); err != nil {
				return err
			}
			return s.listConfigMaps(ctx)
		}},
	)
}

// spotReplacement deletes one pod of the old ReplicaSet and checks its replacement mounts the OLD
// config: the outage the project exists to prevent would be the new, faulty one.
func (s *Story) spotReplacement(ctx context.Context, old revision) error {
	pods, err := s.C.PodsOf(ctx, old.RS)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return fmt.Errorf("ReplicaSet %s has no pod to delete", old.RS.Name)
	}
	victim := pods[0].Name
	if err := s.C.Kube.CoreV1().Pods(s.Namespace).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		return err
	}
	s.say("kubectl delete pod %s", victim)
	err = framework.Eventually(ctx, s.Wait, "a replacement pod in ReplicaSet "+old.RS.Name, func(ctx context.Context) (bool, string, error) {
		pods, err := s.C.PodsOf(ctx, old.RS)
		if err != nil {
			return false, "", err
		}
		names := make([]string, 0, len(pods))
		for _, p := range pods {
			names = append(names, p.Name)
		}
		return len(pods) == replicas-1 && !slices.Contains(names, victim) && framework.ReadyPods(pods) == replicas-1,
			fmt.Sprintf("pods %v", names), nil
	})
	if err != nil {
		return err
	}
	if err := s.expectReads(ctx, old.RS, old); err != nil {
		return fmt.Errorf("the replacement pod of the old ReplicaSet must read the OLD config: %w", err)
	}
	return nil
}

func (s *Story) listConfigMaps(ctx context.Context) error {
	list, err := s.C.Kube.CoreV1().ConfigMaps(s.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	s.say("kubectl get cm | grep %s", s.Rollout)
	for _, cm := range list.Items {
		if cm.Name != "kube-root-ca.crt" {
			s.say("  %-28s %d keys", cm.Name, len(cm.Data))
		}
	}
	return nil
}

// HistoryLimit: with revisionHistoryLimit 1, Argo Rollouts prunes old ReplicaSets itself and the
// garbage collector follows with their config, with no manual delete.
func (s *Story) HistoryLimit(ctx context.Context) error {
	one := int32(1)
	var v1, v2, v3 revision
	return s.run(ctx,
		step{fmt.Sprintf("Rollout %s with revisionHistoryLimit: 1", s.Rollout), func(ctx context.Context) (err error) {
			v1, err = s.start(ctx, framework.RolloutSpec{RevisionHistoryLimit: &one})
			return err
		}},
		step{"two config changes, each promoted", func(ctx context.Context) (err error) {
			afterCreationSecond(v1.RS)
			if v2, err = s.canary(ctx, 1, v1); err != nil {
				return err
			}
			if err := s.promote(ctx, v2, v1); err != nil {
				return err
			}
			afterCreationSecond(v2.RS)
			if v3, err = s.canary(ctx, 2, v2); err != nil {
				return err
			}
			return s.promote(ctx, v3, v2)
		}},
		step{"Argo Rollouts prunes revision 1; its ConfigMap follows", func(ctx context.Context) error {
			if err := s.C.WaitReplicaSetGone(ctx, s.Wait, s.Namespace, v1.RS.Name); err != nil {
				return err
			}
			s.say("✓ Argo Rollouts deleted ReplicaSet %s (revisionHistoryLimit)", v1.RS.Name)
			if err := s.expectGarbageCollected(ctx, v1.ConfigMap); err != nil {
				return err
			}
			for _, kept := range []revision{v2, v3} {
				if err := s.expectExists(ctx, kept.ConfigMap); err != nil {
					return err
				}
				if err := s.expectAttached(ctx, kept.ConfigMap, kept.RS); err != nil {
					return err
				}
			}
			return nil
		}},
	)
}

// afterCreationSecond waits until the wall clock is past rs's creationTimestamp second. Argo Rollouts
// prunes the oldest ReplicaSets by creationTimestamp, which has one-second resolution and breaks ties by
// name; on a fast local cluster two revisions can share a second, and then "oldest" is arbitrary.
func afterCreationSecond(rs *appsv1.ReplicaSet) {
	time.Sleep(time.Until(rs.CreationTimestamp.Add(time.Second)))
}

// Abort: aborting a paused canary scales the stable ReplicaSet back up; its pods keep the old config,
// and both revisions' config survive (the canary ReplicaSet still exists).
func (s *Story) Abort(ctx context.Context) error {
	var v1, v2 revision
	return s.run(ctx,
		step{fmt.Sprintf("Rollout %s, then a faulty config change pauses as a canary", s.Rollout), func(ctx context.Context) (err error) {
			if v1, err = s.start(ctx, framework.RolloutSpec{}); err != nil {
				return err
			}
			v2, err = s.canary(ctx, 1, v1)
			return err
		}},
		step{"abort the canary", func(ctx context.Context) error {
			if err := s.abortCanary(ctx, v1, v2); err != nil {
				return err
			}
			for _, r := range []revision{v1, v2} {
				if err := s.expectAttached(ctx, r.ConfigMap, r.RS); err != nil {
					return err
				}
			}
			return nil
		}},
	)
}

// Undo: rolling back to revision 1 scales its old ReplicaSet up again, and its config is still there.
func (s *Story) Undo(ctx context.Context) error {
	var v1, v2 revision
	return s.run(ctx,
		step{fmt.Sprintf("Rollout %s, a config change, promoted", s.Rollout), func(ctx context.Context) (err error) {
			if v1, err = s.start(ctx, framework.RolloutSpec{}); err != nil {
				return err
			}
			if v2, err = s.canary(ctx, 1, v1); err != nil {
				return err
			}
			return s.promote(ctx, v2, v1)
		}},
		step{"undo to revision 1", func(ctx context.Context) error {
			if err := s.expectExists(ctx, v1.ConfigMap); err != nil {
				return err
			}
			if err := s.C.Undo(ctx, s.Namespace, s.Rollout, 1); err != nil {
				return err
			}
			s.say("kubectl argo rollouts undo %s --to-revision 1", s.Rollout)
			if err := s.Attacher.AfterDeploy(ctx, s.Namespace, s.Rollout, []string{v1.ConfigMap}); err != nil {
				return err
			}
			rs, err := s.waitCurrent(ctx, v1.ConfigMap, 1)
			if err != nil {
				return err
			}
			if rs.UID != v1.RS.UID {
				return fmt.Errorf("undo created ReplicaSet %s instead of reusing %s", rs.Name, v1.RS.Name)
			}
			s.say("✓ ReplicaSet %s (revision 1) scales up again", rs.Name)
			if err := s.expectReads(ctx, rs, v1); err != nil {
				return err
			}
			return s.expectAttached(ctx, v1.ConfigMap, v1.RS)
		}},
	)
}
