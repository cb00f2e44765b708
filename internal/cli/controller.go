package cli

import (
	"context"
	"errors"
	"log/slog"

	"github.com/configmap-attacher/configmap-attacher/internal/manager"
)

const controllerSynopsis = `Run in the cluster and keep, for every ReplicaSet owned by an Argo Rollout or a Deployment, an
ownerReference on each opted-in ConfigMap and Secret its pod template uses (volumes, projected sources,
envFrom, env valueFrom). Opt-in: the label configmap-attacher.io/revisioned=true, set by the base-app chart
and by 'configmap-attacher render'. Objects without it are never touched.

Usage:
  configmap-attacher controller [flags]

Example:
  configmap-attacher controller -namespaces team-a,team-b -metrics-bind-address :8080

Environment: IS_IN_CLUSTER, LOG_LEVEL, VERSION as in Job mode; POD_NAMESPACE (downward API) is the
default namespace of the leader Lease.
`

func runController(ctx context.Context, env Env, args []string) error {
	o := manager.NewOptions(env.Lookup)
	fs := newFlagSet(env, "controller", controllerSynopsis)
	o.AddFlags(fs)
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return usageError{err}
	}
	ctx, clients, err := connect(ctx, env, "controller", slog.LevelInfo, &o.Client)
	if err != nil {
		return err
	}
	return stoppedIsClean(ctx, manager.Run(ctx, o, clients))
}

// stoppedIsClean makes a controller stopped by its signal (SIGTERM from the kubelet, Ctrl-C) exit 0
// whatever step the cancellation interrupted: a start-up write still in flight (the webhook's
// registration, the leader lease) returns context.Canceled, which is the stop asked for, not a failure
// that should fail a rollout of our Deployment or page anyone. A Canceled that did not come from our own
// context is still an error.
func stoppedIsClean(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
