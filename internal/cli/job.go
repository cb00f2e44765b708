package cli

import (
	"context"
	"log/slog"

	"github.com/configmap-attacher/configmap-attacher/internal/oneshot"
)

const jobSynopsis = `Attach named ConfigMaps and Secrets to the current ReplicaSet of an Argo Rollout or a Deployment,
once. Run it as a Job on every deploy, exactly like the original configmap-attacher.

It waits (up to -timeout) until the workload's controller has created the ReplicaSet whose pod template
references every named object, checks everything, then adds an ownerReference (controller: false) to
that ReplicaSet, keeping every existing ownerReference. Re-running changes nothing.

Usage:
  configmap-attacher -rollout NAME -namespace NS -configmaps a,b [-secrets c,d] [flags]
  configmap-attacher -deployment NAME -namespace NS -configmaps a,b [flags]

Example (the original Job's arguments):
  configmap-attacher -rollout demo -namespace devops-apps-01 -configmaps demo-cm-2648648036

Environment:
  IS_IN_CLUSTER  true (default in a pod): use the service account; false: use -kubeconfig, $KUBECONFIG
                 or ~/.kube/config
  LOG_LEVEL      debug, info (default), warn, error, fatal or panic
  VERSION        logged on every run for audit (the build version is logged too)

Exit codes: 0 done (also when nothing was needed), 1 failed (nothing written unless the error says so),
2 bad usage.

Other commands: controller, render, history, diff, version ('configmap-attacher help' lists them).
`

func runJob(ctx context.Context, env Env, args []string) error {
	o := oneshot.NewOptions()
	fs := newFlagSet(env, "attach", jobSynopsis)
	o.AddFlags(fs)
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return usageError{err}
	}
	ctx, clients, err := connect(ctx, env, "attach", slog.LevelInfo, &o.Client)
	if err != nil {
		return err
	}
	return oneshot.Run(ctx, o, clients, env.Stdout)
}
