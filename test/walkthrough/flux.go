package walkthrough

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Flux deploys the story the way a Flux user would: a HelmRelease of charts/base-app from a
// HelmRepository, `attacher: job`, so the attacher is the chart's Helm post-install/post-upgrade hook
// Job, run by Flux's helm-controller (Helm 4). Flux judges the Rollout with
// framework.RolloutHealthChecks, so an upgrade lasts as long as its canary: during the pause the
// upgrade still waits and the post-upgrade hook has not run; it runs after the promotion, as Argo CD's
// wave 1 does. Each deploy changes the HelmRelease's values (a commit in Git, once applied).
//
// kwok's nodes run no container, so when Flux creates the hook Job, Done runs its command with the
// real binary, as the Job's ServiceAccount (hookRunner).
type Flux struct {
	C          *framework.Cluster
	Bin        framework.Binary
	Repository string // a HelmRepository in framework.FluxNamespace serving charts/base-app
	Version    string // base-app's version in it
	Release    string // the HelmRelease's name, also the Helm release name
	Dir        string // where the hook ServiceAccount's kubeconfig is written
	Wait       time.Duration

	values map[string]any
	hooks  hookRunner
	cm     string // the last deploy's ConfigMap
}

// Deploy sets the HelmRelease's values to config revision i (creating the HelmRelease the first time)
// and waits until Flux has applied the Rollout mounting the new ConfigMap; it returns that name.
func (f *Flux) Deploy(ctx context.Context, s *Story, i int, data map[string]string, spec framework.RolloutSpec) (string, error) {
	if f.values == nil {
		f.values = baseAppJobValues(s, spec)
		f.hooks = hookRunner{c: f.C, bin: f.Bin, dir: f.Dir, annotation: "helm.sh/hook", value: "post-"}
	}
	if f.Wait == 0 {
		f.Wait = s.Wait
	}
	f.values["configmaps"] = map[string]any{"cm": map[string]any{"kv_data": kvData(data)}}
	if i == 0 {
		hr := framework.HelmRelease{Name: f.Release, Namespace: s.Namespace, Repository: f.Repository, Chart: "base-app",
			Version: f.Version, Values: f.values, Spec: map[string]any{
				"timeout": "5m", "healthCheckExprs": framework.RolloutHealthChecks(), "driftDetection": map[string]any{"mode": "enabled"}}}
		if err := f.C.ApplyHelmRelease(ctx, hr); err != nil {
			return "", err
		}
		s.say("flux: HelmRelease %s: chart base-app %s from HelmRepository %s, attacher: job (a Helm post-install/post-upgrade hook)",
			f.Release, f.Version, f.Repository)
	} else if err := f.C.SetHelmReleaseValues(ctx, s.Namespace, f.Release, f.values); err != nil {
		return "", err
	}
	var cm string
	err := framework.Eventually(ctx, f.Wait, fmt.Sprintf("Flux to apply config revision %d", i), func(ctx context.Context) (bool, string, error) {
		ro, err := f.C.Rollout(ctx, s.Namespace, s.Rollout)
		if err != nil {
			return false, err.Error(), nil
		}
		cm = ""
		if ro.Spec.Template != nil {
			cm = mountedRevision(&ro.Spec.Template.Spec, s.Rollout+"-cm-")
		}
		if cm == "" || cm == f.cm {
			return false, "the Rollout still mounts " + f.cm, nil
		}
		_, exists, err := f.C.Owners(ctx, s.Namespace, refs.ConfigMap, cm)
		return exists, "ConfigMap " + cm + " not there yet", err
	})
	if err != nil {
		return "", err
	}
	f.cm = cm
	verb := "upgrade"
	if i == 0 {
		verb = "install"
	}
	s.say("flux: helm %s (Helm 4 in helm-controller): ConfigMap %s and Rollout %s mounting it at %s applied", verb, cm, s.Rollout, framework.MountPath)
	return cm, nil
}

// Paused shows the upgrade waiting: the Rollout is Paused, which Flux's health check calls in progress,
// so the release is not Ready yet and the post-upgrade hook has not run; the canary's config is not
// attached yet. It stays: it is in the release (Helm manages it).
func (f *Flux) Paused(ctx context.Context, s *Story, cm string, rs *appsv1.ReplicaSet) error {
	st, err := f.C.WaitHelmRelease(ctx, f.Wait, s.Namespace, f.Release, "to wait for the Rollout in its upgrade", func(st framework.FluxStatus) bool {
		return st.Attempted && st.Conditions["Ready"].Status == "Unknown"
	})
	if err != nil {
		return err
	}
	s.say("flux: HelmRelease %s Ready=%s: %q", f.Release, st.Conditions["Ready"].Status, st.Conditions["Ready"].Message)
	if err := f.hooks.expectWaiting(ctx, s.Namespace, cm, rs); err != nil {
		return err
	}
	s.say("✗ the attacher hook (post-upgrade) waits for the upgrade, which waits for the Rollout: ConfigMap %s is not attached to ReplicaSet %s yet", cm, rs.Name)
	s.say("  (it is in the release, so Helm keeps it; the hook runs after the promotion)")
	return nil
}

// Done waits for Flux to run the post-install/post-upgrade hook, runs the hook's command, and waits for
// the HelmRelease to be Ready.
func (f *Flux) Done(ctx context.Context, s *Story, cm string, rs *appsv1.ReplicaSet) error {
	job, r, sa, err := f.hooks.run(ctx, s.Namespace, f.Wait, "Flux to create the post-upgrade hook Job")
	if err != nil {
		return err
	}
	s.say("flux: the Rollout is Healthy; Helm's hook: Job %s (%s), as ServiceAccount %s:", job.Name, job.Annotations["helm.sh/hook"], sa)
	s.say("$ configmap-attacher %s   (the hook's command, exit %d)", strings.Join(r.Args, " "), r.Code)
	if r.Code != 0 {
		return fmt.Errorf("the hook's command failed: %s", r)
	}
	st, err := f.C.WaitHelmReleaseReady(ctx, f.Wait, s.Namespace, f.Release)
	if err != nil {
		return err
	}
	rel := st.Conditions["Released"]
	s.say("flux: %s (%q); HelmRelease %s Ready", rel.Reason, rel.Message, f.Release)
	return nil
}

// Hooks is how many hook Jobs ran.
func (f *Flux) Hooks() int { return f.hooks.ran }

// mountedRevision is the name of the ConfigMap with that prefix a pod spec reads ("" if none).
func mountedRevision(spec *corev1.PodSpec, prefix string) string {
	for r := range refs.FromPodSpec(spec) {
		if r.Kind == refs.ConfigMap && strings.HasPrefix(r.Name, prefix) {
			return r.Name
		}
	}
	return ""
}
