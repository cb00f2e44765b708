package controller

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Run serves metrics and probes, then runs the controller, under leader election when enabled, until
// ctx ends (graceful shutdown) or leadership is lost (an error: the pod restarts and stands by).
func Run(ctx context.Context, o *Options, clients *kube.Clients) error {
	log := logging.FromContext(ctx)
	if err := kube.WaitReachable(ctx, clients.Kube, clients.Config.Host); err != nil {
		return err
	}
	withRollouts, err := rolloutsInstalled(clients)
	if err != nil {
		return err
	}
	if !withRollouts {
		log.Warn("the Argo Rollouts CRD is not installed: following Deployments only (restart after installing it)")
	}

	m := NewMetrics()
	events, stopEvents := newRecorderEvents(ctx, clients.Kube)
	defer stopEvents()
	c, err := New(clients, o, events, m, withRollouts)
	if err != nil {
		return err
	}

	var leading atomic.Bool
	p := &probes{ready: func() bool {
		if o.LeaderElect && !leading.Load() {
			return true // a standby is ready to take over; it has nothing else to be ready for
		}
		select {
		case <-c.Synced():
			return true
		default:
			return false
		}
	}}
	if o.LeaderElect {
		p.leaderCheck = leaderelection.NewLeaderHealthzAdaptor(o.LeaderElection.RenewDeadline + o.LeaderElection.RetryPeriod)
	}
	if _, err := serve(ctx, "metrics", o.MetricsAddr, metricsHandler(m)); err != nil {
		return err
	}
	if _, err := serve(ctx, "probes", o.ProbeAddr, probesHandler(p)); err != nil {
		return err
	}

	if !o.LeaderElect {
		return c.Run(ctx, o.Workers)
	}
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.LeaderElection.Namespace, o.LeaderElection.Name,
		clients.Kube.CoreV1(), clients.Kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	var runErr error
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaderElection.LeaseDuration,
		RenewDeadline:   o.LeaderElection.RenewDeadline,
		RetryPeriod:     o.LeaderElection.RetryPeriod,
		ReleaseOnCancel: true, // a graceful shutdown hands over at once instead of after LeaseDuration
		Name:            o.LeaderElection.Name,
		WatchDog:        p.leaderCheck,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				leading.Store(true)
				m.leading(true)
				log.Info("became leader", "identity", id)
				runErr = c.Run(ctx, o.Workers)
			},
			OnStoppedLeading: func() {
				leading.Store(false)
				m.leading(false)
				if ctx.Err() == nil {
					lost = true
				}
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					log.Info("standing by", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	log.Info("waiting for the leader Lease", "lease", o.LeaderElection.Namespace+"/"+o.LeaderElection.Name, "identity", id)
	le.Run(ctx)
	if lost {
		return fmt.Errorf("lost the leader Lease %s/%s", o.LeaderElection.Namespace, o.LeaderElection.Name)
	}
	return runErr
}

func rolloutsInstalled(clients *kube.Clients) (bool, error) {
	_, err := clients.Kube.Discovery().ServerResourcesForGroupVersion(workload.RolloutGVR.GroupVersion().String())
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("discovering the Argo Rollouts API: %w", kube.Explain(err))
}
