// Package reconcile runs a controller's workers: it takes keys off a rate-limited queue and calls the
// controller's sync for each, retrying failures with backoff. Controllers write only their sync and
// their event handlers.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// ErrPermanent marks a sync failure that retrying cannot fix: the key is dropped until an event brings
// it back.
var ErrPermanent = errors.New("not retried")

// Result of one sync.
type Result struct {
	// RequeueAfter > 0 asks to sync the key again after that long even without an event.
	RequeueAfter time.Duration
}

// SyncFunc syncs one key.
type SyncFunc func(ctx context.Context, key string) (Result, error)

// Loop is a named queue and the sync its workers run.
type Loop struct {
	Name    string
	Queue   workqueue.TypedRateLimitingInterface[string]
	Sync    SyncFunc
	Metrics *metrics.Metrics
	// Permanent reports errors not worth retrying, besides ErrPermanent (optional).
	Permanent func(error) bool
	// Resync, when set with a ResyncPeriod > 0, runs every ResyncPeriod while the workers run: a
	// controller's backstop against an event it missed or mishandled, which would otherwise leave a key
	// unsynced until something else touches its object. It should only queue keys.
	Resync       func(ctx context.Context)
	ResyncPeriod time.Duration
	// Start, when set, runs once as Run starts, before the workers: a controller whose handlers skip
	// the adds of the informers' first list queues there what those objects need, once the caches hold
	// everything and only where it has work (a queue's maps keep the room a start's every key took
	// after they drain: ~25 MiB at 150,000 revisions). It should only queue keys.
	Start func(ctx context.Context)
	// WorkersPer is how many workers Run starts per worker it is asked for (0 or 1: one each): a
	// controller whose syncs mostly wait on the API server runs more.
	WorkersPer int

	startedOnce, closeOnce sync.Once
	started                chan struct{}
}

func (l *Loop) startedChan() chan struct{} {
	l.startedOnce.Do(func() { l.started = make(chan struct{}) })
	return l.started
}

// Started is closed once Run has run Start: the loop's first pass is queued.
func (l *Loop) Started() <-chan struct{} { return l.startedChan() }

// NewQueue makes the rate-limited queue a Loop uses. With m, the queue reports how long keys wait,
// the longest sync running and retries under the controller's name, and the controller's series
// exist at zero from the start.
func NewQueue(name string, m *metrics.Metrics) workqueue.TypedRateLimitingInterface[string] {
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: name}
	if m != nil {
		m.Controller(name)
		cfg.MetricsProvider = m.Queues()
	}
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), cfg)
}

// Run runs workers until ctx ends, then shuts the queue down and waits for them.
func (l *Loop) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	workers *= max(l.WorkersPer, 1)
	if l.Start != nil {
		l.Start(ctx)
	}
	l.closeOnce.Do(func() { close(l.startedChan()) })
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for l.ProcessNext(ctx) {
				}
			}, time.Second)
		}()
	}
	if l.Resync != nil && l.ResyncPeriod > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); l.resync(ctx) }()
	}
	<-ctx.Done()
	l.Queue.ShutDown()
	wg.Wait()
}

// resync calls Resync every ResyncPeriod until ctx ends; not at once: the start has just queued what
// the informers' first list needed (its adds, or Start).
func (l *Loop) resync(ctx context.Context) {
	t := time.NewTicker(l.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.Resync(ctx)
		}
	}
}

// ProcessNext syncs one key; false once the queue is shut down.
func (l *Loop) ProcessNext(ctx context.Context) bool {
	key, quit := l.Queue.Get()
	if quit {
		return false
	}
	defer l.Queue.Done(key)
	start := time.Now()
	res, err := l.Sync(ctx, key)
	permanent := err != nil && (errors.Is(err, ErrPermanent) || (l.Permanent != nil && l.Permanent(err)))
	if l.Metrics != nil {
		l.Metrics.Synced(l.Name, time.Since(start), err, err != nil && !permanent)
	}
	log := logging.FromContext(ctx)
	switch {
	case err == nil:
		l.Queue.Forget(key)
		if res.RequeueAfter > 0 {
			l.Queue.AddAfter(key, res.RequeueAfter)
		}
	case permanent:
		log.Error("sync failed; not retrying until the object changes", "controller", l.Name, "key", key, "err", err)
		l.Queue.Forget(key)
	default:
		log.Warn("sync failed, will retry", "controller", l.Name, "key", key, "err", err)
		l.Queue.AddRateLimited(key)
	}
	return true
}

// SplitKey splits a "Kind/namespace/name" queue key (caches.Key builds them). A malformed key is
// permanent: retrying cannot mend it.
func SplitKey(key string) (kind, namespace, name string, err error) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("bad key %q: %w", key, ErrPermanent)
	}
	return parts[0], parts[1], parts[2], nil
}
