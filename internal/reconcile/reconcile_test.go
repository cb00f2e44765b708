package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestSplitKey(t *testing.T) {
	tests := []struct {
		key, kind, ns, name string
		bad                 bool
	}{
		{key: "ReplicaSet/prod/web-5d8f", kind: "ReplicaSet", ns: "prod", name: "web-5d8f"},
		{key: "ConfigMap/prod/a/b", kind: "ConfigMap", ns: "prod", name: "a/b"}, // the rest is the name
		{key: "Namespace//prod", kind: "Namespace", ns: "", name: "prod"},       // cluster-scoped
		{key: "ReplicaSet/prod", bad: true},
		{key: "/prod/web", bad: true},
		{key: "ReplicaSet/prod/", bad: true},
	}
	for _, tt := range tests {
		kind, ns, name, err := SplitKey(tt.key)
		if tt.bad {
			if !errors.Is(err, ErrPermanent) {
				t.Errorf("SplitKey(%q) err = %v, want a permanent error", tt.key, err)
			}
			continue
		}
		if err != nil || kind != tt.kind || ns != tt.ns || name != tt.name {
			t.Errorf("SplitKey(%q) = %q, %q, %q, %v", tt.key, kind, ns, name, err)
		}
	}
}

// Start runs once as the loop starts, and the workers sync what it queued; it runs again only when
// the loop does (a new leader's caches may hold what the last one's did not).
func TestLoopStartQueuesBeforeTheWorkersSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var starts atomic.Int32
		var synced []string
		l := &Loop{Name: "test", Queue: NewQueue("test", nil),
			Sync: func(_ context.Context, key string) (Result, error) {
				synced = append(synced, key)
				return Result{}, nil
			}}
		l.Start = func(context.Context) { starts.Add(1); l.Queue.Add("ReplicaSet/ns/unsynced") }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { l.Run(ctx, 2); close(done) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := starts.Load(); got != 1 {
			t.Errorf("Start ran %d times, want once", got)
		}
		if len(synced) != 1 || synced[0] != "ReplicaSet/ns/unsynced" {
			t.Errorf("synced %v, want the key Start queued", synced)
		}
		cancel()
		<-done
	})
}

// Started tells the one who ran the loop when its first pass is queued: not before Start returned
// (the manager ends the start's GC target then), at once for a loop without Start.
func TestLoopStartedOnceStartReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		with := &Loop{Name: "with", Queue: NewQueue("with", nil), Sync: func(context.Context, string) (Result, error) { return Result{}, nil },
			Start: func(context.Context) { <-release }}
		without := &Loop{Name: "without", Queue: NewQueue("without", nil), Sync: func(context.Context, string) (Result, error) { return Result{}, nil }}
		ctx, cancel := context.WithCancel(t.Context())
		var done [2]chan struct{}
		for i, l := range []*Loop{with, without} {
			done[i] = make(chan struct{})
			go func() { l.Run(ctx, 1); close(done[i]) }()
		}
		synctest.Wait()
		select {
		case <-with.Started():
			t.Error("started while Start still runs")
		default:
		}
		select {
		case <-without.Started():
		default:
			t.Error("a loop without Start not started")
		}
		close(release)
		synctest.Wait()
		select {
		case <-with.Started():
		default:
			t.Error("not started once Start returned")
		}
		cancel()
		<-done[0]
		<-done[1]
	})
}

// Resync runs every ResyncPeriod while the loop runs (not at once: the initial list queued everything),
// never with a period of 0, and stops with the loop.
func TestLoopResync(t *testing.T) {
	for _, tt := range []struct {
		period time.Duration
		after  time.Duration
		want   int32
	}{
		{period: 5 * time.Minute, after: 4 * time.Minute, want: 0},
		{period: 5 * time.Minute, after: 16 * time.Minute, want: 3},
		{period: 0, after: time.Hour, want: 0},
	} {
		t.Run(fmt.Sprintf("every %s, after %s", tt.period, tt.after), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				l := &Loop{Name: "test", Queue: NewQueue("test", nil), Sync: func(context.Context, string) (Result, error) { return Result{}, nil },
					Resync: func(context.Context) { calls.Add(1) }, ResyncPeriod: tt.period}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { l.Run(ctx, 1); close(done) }()
				time.Sleep(tt.after)
				synctest.Wait()
				if got := calls.Load(); got != tt.want {
					t.Errorf("%d resyncs, want %d", got, tt.want)
				}
				cancel()
				<-done
				time.Sleep(tt.period + time.Second)
				if got := calls.Load(); got != tt.want {
					t.Errorf("%d resyncs after the loop stopped, want %d", got, tt.want)
				}
			})
		})
	}
}
