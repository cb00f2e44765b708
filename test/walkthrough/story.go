// Package walkthrough is the original write-up (shared/seeds/000) as executable stories: each step does
// what the write-up did on a real cluster, asserts what it showed, and narrates. The e2e tests run the
// stories with assertions; `make demo` runs the same stories and shows the narration.
package walkthrough

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Story is one run of a walkthrough in one namespace.
type Story struct {
	C         *framework.Cluster
	Attacher  Attacher
	Namespace string
	Rollout   string
	Out       io.Writer     // narration
	Wait      time.Duration // bound on each wait for Kubernetes controllers

	// Classic deploys the way the write-up did before revisions: one ConfigMap updated in place and a
	// checksum annotation to roll the pods. Negative control: the spot-replacement step must fail.
	Classic bool
	// SkipAttachChecks skips the ownerReference assertions, so a story without an attacher reaches
	// the garbage-collection step. Negative control: that step must fail.
	SkipAttachChecks bool
	// AfterStep, when set, runs after each step's tree (the demo shows `history` there).
	AfterStep func(ctx context.Context, step int) error
	// Deployer, when set, deploys each revision instead of the story applying the ConfigMap and the
	// Rollout itself (ArgoCD: an Application of charts/base-app); Attacher is then not used.
	Deployer Deployer

	step int
}

// config revisions the stories deploy, in order; each differs so each gets a new name.
var configs = []map[string]string{
	{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\"\n  }\n}\n", "key-1": "value-1"},
	{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\",\n    \"faulty\": true\n  }\n}\n", "key-1": "value-1", "key-2": "value-2"},
	{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service v3\"\n  }\n}\n", "key-1": "value-1", "key-2": "value-2", "key-3": "value-3"},
}

// revision is one deployed config revision and the ReplicaSet that runs it.
type revision struct {
	ConfigMap string
	Data      map[string]string
	RS        *appsv1.ReplicaSet
}

func (s *Story) say(format string, args ...any) {
	fmt.Fprintf(s.Out, format+"\n", args...)
}

func (s *Story) stepf(format string, args ...any) {
	s.step++
	fmt.Fprintf(s.Out, "\n== Step %d: %s\n", s.step, fmt.Sprintf(format, args...))
}

func (s *Story) showTree(ctx context.Context) error {
	t, err := Tree(ctx, s.C, s.Namespace, s.Rollout)
	if err != nil {
		return err
	}
	fmt.Fprint(s.Out, t)
	if s.AfterStep != nil {
		return s.AfterStep(ctx, s.step)
	}
	return nil
}

// deploy creates config revision i and points the Rollout at it (creating the Rollout the first time),
// then lets the attacher do its part.
func (s *Story) deploy(ctx context.Context, i int, spec framework.RolloutSpec) (string, error) {
	if s.Deployer != nil {
		return s.Deployer.Deploy(ctx, s, i, configs[i], spec)
	}
	var cm *corev1.ConfigMap
	var err error
	if s.Classic {
		cm, err = s.C.PutConfigMap(ctx, s.Namespace, s.Rollout+"-cm", configs[i])
	} else {
		cm, err = s.C.CreateConfigRevision(ctx, s.Namespace, s.Rollout+"-cm", configs[i], true)
	}
	if err != nil {
		return "", err
	}
	tmpl := framework.PodTemplate(s.Rollout, []string{cm.Name}, nil)
	if s.Classic {
		// Helm's "automatically roll deployments" trick: a new checksum rolls the pods.
		tmpl.Annotations = map[string]string{"checksum/config": framework.RevisionedName("checksum", configs[i])}
	}
	if i == 0 {
		spec.Template = &tmpl
		err = s.C.CreateRollout(ctx, s.Namespace, s.Rollout, spec)
	} else {
		err = s.C.SetRolloutTemplate(ctx, s.Namespace, s.Rollout, tmpl)
	}
	if err != nil {
		return "", err
	}
	s.say("kubectl apply: ConfigMap %s and Rollout %s mounting it at %s", cm.Name, s.Rollout, framework.MountPath)
	if err := s.Attacher.AfterDeploy(ctx, s.Namespace, s.Rollout, []string{cm.Name}); err != nil {
		return "", err
	}
	if _, ok := s.Attacher.(*Job); ok {
		s.say("configmap-attacher -rollout %s -namespace %s -configmaps %s   (the Job, unchanged)", s.Rollout, s.Namespace, cm.Name)
	}
	return cm.Name, nil
}

// waitCurrent waits until the Rollout runs a ReplicaSet mounting configMap with `ready` ready pods,
// and returns it.
func (s *Story) waitCurrent(ctx context.Context, configMap string, ready int) (*appsv1.ReplicaSet, error) {
	return s.waitRevision(ctx, fmt.Sprintf("mounting %s", configMap), ready, func(rs *appsv1.ReplicaSet) bool {
		return refs.FromPodSpec(&rs.Spec.Template.Spec).Has(refs.Ref{Kind: refs.ConfigMap, Name: configMap})
	})
}

// waitRevision waits until the Rollout's current ReplicaSet is one that runs (a description for the
// message) and has `ready` ready pods, and returns it.
func (s *Story) waitRevision(ctx context.Context, what string, ready int, runs func(*appsv1.ReplicaSet) bool) (*appsv1.ReplicaSet, error) {
	var current *appsv1.ReplicaSet
	err := framework.Eventually(ctx, s.Wait, fmt.Sprintf("a ReplicaSet of %s %s with %d ready pods", s.Rollout, what, ready),
		func(ctx context.Context) (bool, string, error) {
			res, err := s.C.Resolve(ctx, s.Namespace, s.Rollout)
			if err != nil {
				return false, "", err
			}
			rs, err := res.Current()
			if err != nil {
				return false, err.Error(), nil
			}
			if !runs(rs) {
				return false, "current ReplicaSet " + rs.Name + " is not it yet", nil
			}
			pods, err := s.C.PodsOf(ctx, rs)
			if err != nil {
				return false, "", err
			}
			current = rs
			n := framework.ReadyPods(pods)
			return n == ready && len(pods) == ready, fmt.Sprintf("%s has %d pods, %d ready", rs.Name, len(pods), n), nil
		})
	return current, err
}

// abortCanary aborts the Rollout's canary and waits until the stable revision runs every replica again
// and its pods read their config.
func (s *Story) abortCanary(ctx context.Context, stable, canary revision) error {
	if err := s.C.Abort(ctx, s.Namespace, s.Rollout); err != nil {
		return err
	}
	s.say("kubectl argo rollouts abort %s", s.Rollout)
	if err := s.C.WaitPods(ctx, s.Wait, stable.RS, replicas); err != nil {
		return err
	}
	if err := s.C.WaitPods(ctx, s.Wait, canary.RS, 0); err != nil {
		return err
	}
	return s.expectReads(ctx, stable.RS, stable)
}

// waitCanaryPaused waits for the canary to stop at its pause: {} step with rs running 1 pod and the
// stable revision the others, and says so.
func (s *Story) waitCanaryPaused(ctx context.Context, rs *appsv1.ReplicaSet, stable revision) error {
	if err := s.C.WaitPaused(ctx, s.Wait, s.Namespace, s.Rollout); err != nil {
		return err
	}
	if err := s.C.WaitPods(ctx, s.Wait, stable.RS, replicas-1); err != nil {
		return err
	}
	s.say("the canary paused: ReplicaSet %s runs 1 pod, ReplicaSet %s keeps %d", rs.Name, stable.RS.Name, replicas-1)
	return nil
}

// waitStable waits until Argo Rollouts records rs as the stable ReplicaSet. Deploying before that
// (right after the pods moved) makes Argo treat rs as an abandoned canary and scale it to zero.
func (s *Story) waitStable(ctx context.Context, rs *appsv1.ReplicaSet) error {
	hash := rs.Labels[workload.RolloutHashLabel]
	return framework.Eventually(ctx, s.Wait, "ReplicaSet "+rs.Name+" to become stable", func(ctx context.Context) (bool, string, error) {
		ro, err := s.C.Rollout(ctx, s.Namespace, s.Rollout)
		if err != nil {
			return false, "", err
		}
		return ro.Status.StableRS == hash, "stableRS " + ro.Status.StableRS, nil
	})
}

// expectAttached checks cm is attached to rs (waiting a little: the controller is asynchronous).
func (s *Story) expectAttached(ctx context.Context, cm string, rs *appsv1.ReplicaSet) error {
	if s.SkipAttachChecks {
		return nil
	}
	if err := s.C.WaitAttached(ctx, 20*time.Second, s.Namespace, refs.ConfigMap, cm, rs); err != nil {
		return err
	}
	s.say("✓ ConfigMap %s has an ownerReference to ReplicaSet %s (controller: false)", cm, rs.Name)
	return nil
}

// expectMounts checks every pod of rs mounts exactly cm: what a restarted pod would read.
func (s *Story) expectMounts(ctx context.Context, rs *appsv1.ReplicaSet, cm string) error {
	_, err := s.mounted(ctx, rs, cm)
	return err
}

// expectReads checks every pod of rs mounts exactly r's ConfigMap and that it holds r's content: what
// the pod's process reads from /etc/kubernetes/configmaps.
func (s *Story) expectReads(ctx context.Context, rs *appsv1.ReplicaSet, r revision) error {
	n, err := s.mounted(ctx, rs, r.ConfigMap)
	if err != nil {
		return err
	}
	cm, err := s.C.Kube.CoreV1().ConfigMaps(s.Namespace).Get(ctx, r.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("ConfigMap %s mounted by %d pod(s) of ReplicaSet %s: %w", r.ConfigMap, n, rs.Name, err)
	}
	if !maps.Equal(cm.Data, r.Data) {
		return fmt.Errorf("pods of ReplicaSet %s read ConfigMap %s, whose content is now another revision's: %v", rs.Name, r.ConfigMap, keys(cm.Data))
	}
	s.say("✓ they read that revision's content (%d keys)", len(cm.Data))
	return nil
}

func keys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

func (s *Story) mounted(ctx context.Context, rs *appsv1.ReplicaSet, cm string) (int, error) {
	pods, err := s.C.PodsOf(ctx, rs)
	if err != nil {
		return 0, err
	}
	if len(pods) == 0 {
		return 0, fmt.Errorf("ReplicaSet %s has no pods to check", rs.Name)
	}
	for _, p := range pods {
		got := configVolume(&p.Spec)
		if !slices.Equal(got, []string{cm}) {
			return 0, fmt.Errorf("pod %s (ReplicaSet %s) mounts %v at %s, want ConfigMap %s", p.Name, rs.Name, got, framework.MountPath, cm)
		}
	}
	s.say("✓ the %d pod(s) of ReplicaSet %s mount ConfigMap %s", len(pods), rs.Name, cm)
	return len(pods), nil
}

func (s *Story) expectExists(ctx context.Context, cm string) error {
	_, exists, err := s.C.Owners(ctx, s.Namespace, refs.ConfigMap, cm)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("ConfigMap %s was deleted although a live ReplicaSet uses it", cm)
	}
	return nil
}

func (s *Story) expectGarbageCollected(ctx context.Context, cm string) error {
	if err := s.C.WaitGone(ctx, s.Wait, s.Namespace, refs.ConfigMap, cm); err != nil {
		return err
	}
	s.say("✓ ConfigMap %s was garbage collected", cm)
	return nil
}

func (s *Story) deleteReplicaSets(ctx context.Context, rss ...*appsv1.ReplicaSet) error {
	for _, rs := range rss {
		if err := s.C.Kube.AppsV1().ReplicaSets(s.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		s.say("kubectl delete replicaset %s", rs.Name)
	}
	return nil
}

// configVolume lists the ConfigMaps of the volume mounted at framework.MountPath (pods also get an
// injected service-account volume projecting kube-root-ca.crt, which is not the app's config).
func configVolume(spec *corev1.PodSpec) []string {
	var volume string
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.MountPath == framework.MountPath {
				volume = m.Name
			}
		}
	}
	var out []string
	for _, v := range spec.Volumes {
		if v.Name != volume || v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ConfigMap != nil {
				out = append(out, src.ConfigMap.Name)
			}
		}
	}
	return out
}
