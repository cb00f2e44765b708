package walkthrough

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Deployer puts a story's revisions live in place of the story's own apply (Story.Deployer).
type Deployer interface {
	// Deploy makes config revision i (data) live, mounted by the story's Rollout, and returns the
	// ConfigMap's name. spec carries the Rollout settings of the first deploy (replicas, history).
	Deploy(ctx context.Context, s *Story, i int, data map[string]string, spec framework.RolloutSpec) (string, error)
	// Paused checks and narrates what the deploy tool does while a canary waits at its pause; cm is
	// the canary's config, rs its ReplicaSet.
	Paused(ctx context.Context, s *Story, cm string, rs *appsv1.ReplicaSet) error
	// Done waits until the tool has finished the deploy that made rs current (its sync, its hooks) and
	// narrates it. Called once rs runs every pod: after the first deploy and after each promotion.
	Done(ctx context.Context, s *Story, cm string, rs *appsv1.ReplicaSet) error
}

func (s *Story) deployerDone(ctx context.Context, cm string, rs *appsv1.ReplicaSet) error {
	if s.Deployer == nil {
		return nil
	}
	return s.Deployer.Done(ctx, s, cm, rs)
}

// expectCanaryAttached checks the canary's config during the pause: attached, unless a Deployer says
// what happens instead.
func (s *Story) expectCanaryAttached(ctx context.Context, cm string, rs *appsv1.ReplicaSet) error {
	if s.Deployer != nil {
		return s.Deployer.Paused(ctx, s, cm, rs)
	}
	return s.expectAttached(ctx, cm, rs)
}

// ArgoCD deploys the story as the write-up's team did: an Argo CD Application of charts/base-app
// from a Helm repository, `attacher: job`, so the attacher is an Argo CD Sync hook Job in sync-wave 1,
// after the Rollout (wave 0). Each deploy changes the Application's values and asks for a sync with
// prune, as `argocd app sync --prune` does.
//
// kwok's nodes run no container (a Job's pod "completes" without running anything), so when Argo CD
// creates the hook Job, Done runs its command with the real binary, its arguments and environment,
// authenticated as the Job's own ServiceAccount (the chart's, with the chart's Role). The e2e test
// TestArgoCDBaseAppWithTheSyncHookJob runs the same hook as a real pod on a real node.
type ArgoCD struct {
	C       *framework.Cluster
	Bin     framework.Binary
	RepoURL string // a Helm repository serving charts/base-app (framework.ServeChartRepo)
	Version string // base-app's version in it
	App     string // the Application's name, also the Helm release name
	Dir     string // where the hook ServiceAccount's kubeconfig is written
	Wait    time.Duration

	values map[string]any
	hooks  hookRunner
}

// Deploy sets the Application's values to config revision i (creating the Application the first
// time), asks for a sync with prune and waits until Argo CD applied the Rollout mounting the new
// ConfigMap. It returns that ConfigMap's name.
func (a *ArgoCD) Deploy(ctx context.Context, s *Story, i int, data map[string]string, spec framework.RolloutSpec) (string, error) {
	kv := kvData(data)
	if a.values == nil {
		a.values = baseAppJobValues(s, spec)
		a.hooks = hookRunner{c: a.C, bin: a.Bin, dir: a.Dir, annotation: "argocd.argoproj.io/hook", value: "Sync"}
	}
	a.values["configmaps"] = map[string]any{"cm": map[string]any{"kv_data": kv}}
	if a.Wait == 0 {
		a.Wait = s.Wait
	}
	if i == 0 {
		app := framework.HelmApp{Name: a.App, RepoURL: a.RepoURL, Chart: "base-app", Version: a.Version, Namespace: s.Namespace,
			Values: a.values, Cascade: true}
		if err := a.C.ApplyApplication(ctx, app); err != nil {
			return "", err
		}
		s.say("argocd: Application %s: chart base-app %s from %s, attacher: job (a Sync hook in wave 1)", a.App, a.Version, a.RepoURL)
	} else if err := a.C.SetApplicationValues(ctx, a.App, a.values); err != nil {
		return "", err
	}
	if _, err := a.C.WaitApplication(ctx, a.Wait, a.App, "to finish its previous operation", func(st framework.AppStatus) bool {
		return !st.OperationPending
	}); err != nil {
		return "", err
	}
	if err := a.C.SyncApplication(ctx, a.App, true, nil); err != nil {
		return "", err
	}
	var cm string
	st, err := a.C.WaitApplication(ctx, a.Wait, a.App, "to apply config revision "+fmt.Sprint(i), func(st framework.AppStatus) bool {
		if !st.Deployed {
			return false
		}
		rollout := false
		for _, r := range st.SyncResults {
			if r.Kind == "ConfigMap" && r.Status == "Synced" && strings.HasPrefix(r.Name, s.Rollout+"-cm-") {
				cm = r.Name
			}
			rollout = rollout || r.Kind == "Rollout" && r.Name == s.Rollout
		}
		return rollout && cm != ""
	})
	if err != nil {
		return "", err
	}
	var pruned []string
	for _, r := range st.SyncResults {
		if r.Status == "Pruned" {
			pruned = append(pruned, r.Kind+" "+r.Name)
		}
	}
	s.say("argocd app sync %s --prune: ConfigMap %s and Rollout %s mounting it at %s applied; pruned: %s",
		a.App, cm, s.Rollout, framework.MountPath, orNone(pruned))
	return cm, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, ", ")
}

// Paused shows the sync waiting: the Rollout (wave 0) is Suspended, not Healthy, so Argo CD does not
// start wave 1, and the hook has not run: the canary's config is not attached yet. It stays, being
// in git (Argo CD manages it).
func (a *ArgoCD) Paused(ctx context.Context, s *Story, cm string, rs *appsv1.ReplicaSet) error {
	st, err := a.C.WaitApplication(ctx, a.Wait, a.App, "to wait for the Rollout in its sync", func(st framework.AppStatus) bool {
		return st.OperationPending && st.OperationPhase == "Running" && st.Health == "Suspended" &&
			strings.Contains(st.OperationMessage, "argoproj.io/Rollout/"+s.Rollout)
	})
	if err != nil {
		return err
	}
	s.say("argocd: sync %s, %q; Application %s", st.OperationPhase, st.OperationMessage, st.Health)
	if err := a.hooks.expectWaiting(ctx, s.Namespace, cm, rs); err != nil {
		return err
	}
	s.say("✗ the attacher hook (wave 1) waits for the Rollout (wave 0) to be Healthy: ConfigMap %s is not attached to ReplicaSet %s yet", cm, rs.Name)
	s.say("  (it is in git, so Argo CD keeps it; the hook runs after the promotion)")
	return nil
}

// Done waits for the sync to run the Sync hook, runs the hook's command, and waits for the sync to
// end Synced and Healthy.
func (a *ArgoCD) Done(ctx context.Context, s *Story, cm string, rs *appsv1.ReplicaSet) error {
	job, r, sa, err := a.hooks.run(ctx, s.Namespace, a.Wait, "Argo CD to create the Sync hook Job")
	if err != nil {
		return err
	}
	s.say("argocd: the Rollout is Healthy; wave 1: Sync hook Job %s, as ServiceAccount %s:", job.Name, sa)
	s.say("$ configmap-attacher %s   (the hook's command, exit %d)", strings.Join(r.Args, " "), r.Code)
	if r.Code != 0 {
		return fmt.Errorf("the Sync hook's command failed: %s", r)
	}
	if _, err := a.C.WaitApplication(ctx, a.Wait, a.App, "to finish its sync", func(st framework.AppStatus) bool {
		return !st.OperationPending && st.Deployed && st.OperationPhase != "Running"
	}); err != nil {
		return err
	}
	st, err := a.C.WaitSynced(ctx, a.Wait, a.App)
	if err != nil {
		return err
	}
	s.say("argocd: sync %s (%q); Application %s and %s", st.OperationPhase, st.OperationMessage, st.Sync, st.Health)
	return nil
}

// Hooks is how many Sync hook Jobs ran.
func (a *ArgoCD) Hooks() int { return a.hooks.ran }
