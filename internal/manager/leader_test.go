package manager

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func electionConfig(t *testing.T, client *fake.Clientset) leaderelection.LeaderElectionConfig {
	t.Helper()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, "kube-system", "configmap-attacher",
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: "me"})
	if err != nil {
		t.Fatal(err)
	}
	return leaderelection.LeaderElectionConfig{Lock: lock, Name: "configmap-attacher", ReleaseOnCancel: true,
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
}

// Workers drain their in-flight writes after the context ends; the process must not exit (nor a
// standby take over on a released Lease) before they have.
func TestRunLeadingReturnsOnlyAfterRunHasReturned(t *testing.T) {
	client := fake.NewSimpleClientset()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var finished atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- runLeading(ctx, electionConfig(t, client), func(bool) {}, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			time.Sleep(300 * time.Millisecond) // the last writes
			finished.Store(true)
			return nil
		})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("never became leader")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("graceful shutdown returned %v", err)
	}
	if !finished.Load() {
		t.Fatal("runLeading returned while run was still running")
	}
	lease, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "configmap-attacher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("Lease still held by %q after a graceful shutdown; want it released", *h)
	}
}

func TestRunLeadingReportsALostLease(t *testing.T) {
	client := fake.NewSimpleClientset()
	// The fake's reactors may not change while it serves requests: this one is there from the start
	// and switched on later.
	var partitioned atomic.Bool
	client.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if partitioned.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	started := make(chan struct{})
	done := make(chan error, 1)
	var states []bool
	go func() {
		done <- runLeading(context.Background(), electionConfig(t, client), func(yes bool) { states = append(states, yes) }, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return nil
		})
	}()
	<-started
	// The API server stops accepting renewals (this replica is partitioned, say) past the renew deadline.
	partitioned.Store(true)
	select {
	case err := <-done:
		if !errors.Is(err, ErrLostLease) {
			t.Fatalf("err = %v, want ErrLostLease", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10 s after losing the Lease")
	}
	if len(states) != 2 || !states[0] || states[1] {
		t.Fatalf("leading reported %v, want [true false]", states)
	}
}
