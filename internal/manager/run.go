package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/controller"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/protection"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/internal/webhookcert"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Run serves metrics and probes, then runs the controllers, under leader election when enabled, until
// ctx ends (graceful shutdown) or leadership is lost (ErrLostLease: the process exits, and its restart
// stands by). Every replica keeps the caches warm and, with pinning, serves the webhook; only the
// leader writes.
func Run(parent context.Context, o *Options, clients *kube.Clients) (err error) {
	// Whatever ends Run ends everything it started: a replica that lost its Lease must not stay up,
	// Running and Ready, its webhook and probes answering while it leads nothing; it drains and exits.
	ctx, stop := context.WithCancel(parent)
	defer stop()
	// A server that fails after start (the webhook's port taken by the time it listens) ends Run too.
	var failedOnce sync.Once
	var failed error
	fail := func(err error) { failedOnce.Do(func() { failed = err; stop() }) }
	defer func() {
		if failed != nil && parent.Err() == nil {
			err = failed
		}
	}()
	log := logging.FromContext(ctx)
	setMemoryLimit(ctx, o.MemoryLimitRatio)
	startOver := startGC(ctx, o.StartGCPercent, o.GCPercent)
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
	cacheOpts := caches.Options{Namespaces: o.Namespaces, ConfigKinds: kinds, Rollouts: withRollouts,
		AllConfigs: o.TriggerEnabled(), ReplicaSetLabels: !selector.Empty()}
	cs, err := caches.New(clients, cacheOpts)
	if err != nil {
		return err
	}
	if o.Pinning.Enabled {
		if err := cs.NewPinning(clients, cacheOpts); err != nil {
			return err
		}
	}
	m := metrics.New()
	// Every replica reports it from its caches, the standby too: the alert on finalizers nobody will lift
	// (no leader while objects carry ours) reads it.
	m.Gauge("configmap_attacher_protected_objects", "Opted-in objects carrying the in-use protection finalizer, which only a running controller lifts.",
		func() float64 {
			return float64(cs.CountConfigs(func(f caches.ConfigFacts) bool { return api.HasFinalizer(f.Finalizers, api.InUseFinalizer) }))
		})
	// The alert on objects nothing can read (another controller's ControllerRevisions, a Rollout of a
	// newer CRD) reads it: they are skipped, so that they stall neither a cache nor a deletion.
	m.GaugeByLabel("configmap_attacher_unreadable_objects",
		"Objects the caches skip because they cannot be read as a pod template (a ControllerRevision whose data is not one, a Rollout that cannot be converted): they make no pods. By kind.",
		"kind", []string{string(caches.ControllerRevision), string(caches.Rollout)}, func(kind string) float64 { return float64(cs.Unreadable(caches.Kind(kind))) })
	events, stopEvents := attach.NewRecorderEvents(ctx, clients.Kube)
	defer stopEvents()
	writer := &attach.Writer{Client: clients.Metadata, Events: events}
	adm, err := newAdmission(ctx, o, clients, cs, writer, events, m)
	if err != nil {
		return err
	}
	loops, err := controllers(cs, writer, m, events, clients, o, selector, withRollouts)
	if err != nil {
		return err
	}
	loops = append(loops, adm.loops()...)

	var synced atomic.Bool
	var hook *webhook
	p := &probes{ready: func() bool {
		return synced.Load() && (hook == nil || hook.serving.Ready()) && ctx.Err() == nil
	}}
	if o.LeaderElect {
		p.leaderCheck = leaderelection.NewLeaderHealthzAdaptor(o.LeaderElection.RenewDeadline + o.LeaderElection.RetryPeriod)
	}
	if _, err := serve(ctx, "metrics", o.MetricsAddr, metricsHandler(m, o.Profiling)); err != nil {
		return err
	}
	if _, err := serve(ctx, "probes", o.ProbeAddr, probesHandler(p)); err != nil {
		return err
	}

	// Every replica caches: a standby's webhook answers from warm caches, and it takes over faster.
	cs.Start(ctx)
	for _, ns := range displayNamespaces(o.Namespaces) {
		log.Info("watching", "namespace", ns)
	}
	if !cs.WaitForSync(ctx.Done()) || !adm.start(ctx) {
		return fmt.Errorf("informer caches did not sync before shutdown")
	}
	if adm.webhook() {
		if hook, err = serveWebhook(ctx, o, clients, cs, writer, m, fail); err != nil {
			return err
		}
		loops = append(loops, hook.certs.Loop())
		// Returning ends the process: first let the webhook drain (stop starts it when Run returns
		// before its parent context ended, as on a lost Lease).
		defer func() { stop(); <-hook.stopped }()
	}
	synced.Store(true)
	// The start's GC target holds until the start's work is done: a leader's first pass queued and its
	// sweep listed (what they allocate, at twice the live heap, was the start's peak), or standing by.
	endStart := sync.OnceFunc(startOver)

	run := func(ctx context.Context) error {
		log.Info("reconciling every existing revision and config object", "workers", o.Workers)
		var wg sync.WaitGroup
		for _, l := range loops {
			wg.Add(1)
			go func() { defer wg.Done(); l.Run(ctx, o.Workers) }()
		}
		go adm.lead(ctx)
		if err := protection.Sweep(ctx, writer, o.Namespaces, kinds); err != nil {
			log.Warn("sweeping objects opted out while the controller was away", "err", err)
		}
		for _, l := range loops {
			select {
			case <-l.Started():
			case <-ctx.Done():
			}
		}
		endStart()
		wg.Wait()
		log.Info("workers stopped")
		return nil
	}
	if !o.LeaderElect {
		// The only replica leads: the alert on finalizers nobody lifts reads this gauge.
		m.Leading(true)
		defer m.Leading(false)
		return run(ctx)
	}
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	// The Lease's renewals have a client and rate limiter of their own, as kube-controller-manager's:
	// behind a busy controllers' client they could miss the renew deadline and lose the Lease.
	election, err := clients.Separate()
	if err != nil {
		return err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.LeaderElection.Namespace, o.LeaderElection.Name,
		election.Kube.CoreV1(), election.Kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
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
				endStart()
			}
		}},
	}, m.Leading, run)
}

// controllers builds the controllers the leader runs.
func controllers(cs *caches.Caches, writer *attach.Writer, m *metrics.Metrics, events *attach.RecorderEvents, clients *kube.Clients,
	o *Options, selector labels.Selector, withRollouts bool) ([]*reconcile.Loop, error) {
	attacher, err := controller.New(cs, writer, m, controller.Options{ReplicaSetSelector: selector, AttachAllNamespaces: o.AttachAllNamespaces})
	if err != nil {
		return nil, err
	}
	protector, err := protection.New(cs, writer, protection.APIUsers{Kube: clients.Kube, Dynamic: clients.Dynamic, Rollouts: withRollouts},
		clients.Kube, events.Recorder, m, o.HeldResync)
	if err != nil {
		return nil, err
	}
	loops := []*reconcile.Loop{attacher.Loop(), protector.Loop()}
	if o.Pinning.Enabled {
		taker := &pinning.Taker{Kube: clients.Kube, Writer: writer}
		if o.policyMode() {
			taker = nil // the table controller takes the snapshots the entries record
		}
		pinner, err := pinning.New(cs, taker, events.Recorder, m)
		if err != nil {
			return nil, err
		}
		loops = append(loops, pinner.Loop())
	}
	if o.TriggerEnabled() {
		t, err := trigger.New(cs, clients.Kube, clients.Dynamic, events.Recorder, m, trigger.Options{Settle: o.Trigger.Settle, MaxWait: o.Trigger.MaxWait,
			KeySecret: types.NamespacedName{Namespace: o.LeaderElection.Namespace, Name: o.Trigger.KeySecret}})
		if err != nil {
			return nil, err
		}
		loops = append(loops, t.Loop())
	}
	return loops, nil
}

// webhook is the pinning webhook: served by every replica from the certificate Secret it follows; its
// certificate controller (the CA, the serving certificate, the caBundle) runs on the leader.
type webhook struct {
	serving *webhookcert.Serving
	certs   *webhookcert.Controller
	// stopped is closed once the server has drained after ctx ended.
	stopped <-chan struct{}
}

// serveWebhook serves the pinning webhook over TLS with the certificate the Secret holds (none yet:
// not ready, until the leader stores one), and makes the controller that keeps that certificate and the
// configuration's caBundle (the whole configuration at -webhook-url; the chart's caBundle otherwise).
func serveWebhook(ctx context.Context, o *Options, clients *kube.Clients, cs *caches.Caches, writer *attach.Writer, m *metrics.Metrics, fail func(error)) (*webhook, error) {
	po := o.Pinning
	ns := o.LeaderElection.Namespace
	reg := pinning.Registration{Kube: clients.Kube, Configuration: po.Configuration, URL: strings.TrimSuffix(po.URL, "/"),
		FailurePolicy: admissionregistrationv1.FailurePolicyType(po.FailurePolicy), TimeoutSeconds: int32(po.TimeoutSeconds),
		Namespaces: o.Namespaces, OwnNamespace: ns}
	inf := webhookcert.NewInformers(clients.Kube, ns, po.certSecret(), po.Configuration)
	serving := webhookcert.NewServing()
	if err := inf.Serve(serving, reg); err != nil {
		return nil, err
	}
	certs, err := webhookcert.NewController(clients.Kube, inf, serving, reg, m, webhookcert.Options{Namespace: ns, Secret: po.certSecret(),
		Configuration: po.Configuration, Hosts: po.hosts(), Validity: po.CertValidity, OwnsConfiguration: po.URL != ""})
	if err != nil {
		return nil, err
	}
	if err := inf.Run(ctx); err != nil {
		return nil, err
	}
	serving.Report(m)
	// The pod path's own clients: its calls (a revision's first pod reads and snapshots) must not queue
	// behind the controllers' writes in one client-side rate limiter, or a large deploy could push an
	// admission past timeoutSeconds.
	podPath, err := clients.Separate()
	if err != nil {
		return nil, err
	}
	hook := &pinning.Webhook{Caches: cs, Taker: &pinning.Taker{Kube: podPath.Kube, Writer: &attach.Writer{Client: podPath.Metadata, Events: writer.Events}},
		Log: logging.FromContext(ctx), Metrics: m}
	mux := http.NewServeMux()
	mux.Handle(pinning.Path, hook)
	stopped, err := server{name: "webhook", addr: po.listenAddress(), handler: limitInFlight(mux, po.MaxInFlight),
		tls: &tls.Config{GetCertificate: serving.GetCertificate, MinVersion: tls.VersionTLS12}, http2: po.HTTP2,
		drain: po.shutdownDelay(), listenAfter: serving.Loaded(), failed: fail}.run(ctx)
	if err != nil {
		return nil, err
	}
	return &webhook{serving: serving, certs: certs, stopped: stopped}, nil
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
