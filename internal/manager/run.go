package manager

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/controller"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/protection"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Run serves metrics and probes, then runs the controllers, under leader election when enabled, until
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
		log.Warn(noRolloutsMessage)
	}
	selector, err := labels.Parse(o.ReplicaSetSelector)
	if err != nil {
		return err
	}
	kinds := []refs.Kind{refs.ConfigMap}
	if o.Secrets {
		kinds = append(kinds, refs.Secret)
	}
	cs, err := caches.New(clients, caches.Options{Namespaces: o.Namespaces, ConfigKinds: kinds, Rollouts: withRollouts})
	if err != nil {
		return err
	}
	m := metrics.New()
	events, stopEvents := attach.NewRecorderEvents(ctx, clients.Kube)
	defer stopEvents()
	writer := &attach.Writer{Client: clients.Metadata, Events: events}
	attacher, err := controller.New(cs, writer, m, controller.Options{ReplicaSetSelector: selector, AttachAllNamespaces: o.AttachAllNamespaces})
	if err != nil {
		return err
	}
	protector, err := protection.New(cs, writer, protection.APIUsers{Kube: clients.Kube, Dynamic: clients.Dynamic, Rollouts: withRollouts},
		clients.Kube, events.Recorder, m)
	if err != nil {
		return err
	}

	var synced, leading atomic.Bool
	p := &probes{ready: func() bool {
		// A standby is ready to take over; it has nothing else to be ready for.
		return synced.Load() || (o.LeaderElect && !leading.Load())
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

	run := func(ctx context.Context) error {
		cs.Start(ctx.Done())
		for _, ns := range displayNamespaces(o.Namespaces) {
			log.Info("watching", "namespace", ns)
		}
		if !cs.WaitForSync(ctx.Done()) {
			return fmt.Errorf("informer caches did not sync before shutdown")
		}
		synced.Store(true)
		log.Info("caches synced; reconciling every existing revision and config object", "workers", o.Workers)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); attacher.Loop().Run(ctx, o.Workers) }()
		go func() { defer wg.Done(); protector.Loop().Run(ctx, o.Workers) }()
		if err := protection.Sweep(ctx, writer, o.Namespaces, kinds); err != nil {
			log.Warn("sweeping objects opted out while the controller was away", "err", err)
		}
		wg.Wait()
		log.Info("workers stopped")
		return nil
	}
	if !o.LeaderElect {
		return run(ctx)
	}
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.LeaderElection.Namespace, o.LeaderElection.Name,
		clients.Kube.CoreV1(), clients.Kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	log.Info("waiting for the leader Lease", "lease", o.LeaderElection.Namespace+"/"+o.LeaderElection.Name, "identity", id)
	return runLeading(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaderElection.LeaseDuration,
		RenewDeadline:   o.LeaderElection.RenewDeadline,
		RetryPeriod:     o.LeaderElection.RetryPeriod,
		ReleaseOnCancel: true, // a graceful shutdown hands over at once instead of after LeaseDuration
		Name:            o.LeaderElection.Name,
		WatchDog:        p.leaderCheck,
		Callbacks: leaderelection.LeaderCallbacks{OnNewLeader: func(identity string) {
			if identity != id {
				log.Info("standing by", "leader", identity)
			}
		}},
	}, func(yes bool) { leading.Store(yes); m.Leading(yes) }, run)
}

// noRolloutsMessage says what a cluster without Argo Rollouts changes: ReplicaSets are watched
// whatever owns them, so those of Rollouts are still attached and protected; only the Rollouts
// themselves are not read.
const noRolloutsMessage = "the Argo Rollouts CRD is not installed: Rollouts themselves are not watched " +
	"(their templates and attach-all annotation are not read) but ReplicaSets of any Rollout are still attached; restart after installing Argo Rollouts"

func displayNamespaces(ns []string) []string {
	if len(ns) == 0 {
		return []string{"(all)"}
	}
	return ns
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
