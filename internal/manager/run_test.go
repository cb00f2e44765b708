package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// fakeClients are clients of an API server that holds nothing yet; its discovery lists no Rollouts.
func fakeClients() *kube.Clients {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{workload.RolloutGVR: "RolloutList"})
	return kube.FakeClients(fake.NewSimpleClientset(), dyn, testutil.FakeMetadata())
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A leader whose Lease another holder took (its renewals failed past the renew deadline, then someone
// else acquired it) must not stay up leading nothing, Running and Ready: with pinning on, its webhook
// drains and Run returns ErrLostLease, so the process exits and is restarted as a standby.
func TestRunReturnsOnceTheLeaseIsLostWithPinningOn(t *testing.T) {
	clients := fakeClients()
	o := NewOptions(func(string) (string, bool) { return "", false })
	o.Namespaces = []string{"app"}
	o.MetricsAddr, o.ProbeAddr = "", ""
	o.LeaderElection = LeaderElectionOptions{Namespace: "home", Name: "cma", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond}
	o.Pinning.Enabled, o.Pinning.URL, o.Pinning.Configuration = true, fmt.Sprintf("https://127.0.0.1:%d", freePort(t)), "pin-app"
	o.Pinning.CertValidity = time.Hour
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	// The fake keeps no resourceVersions, so it would let our renewal overwrite the other holder: these
	// reactors play the API server's part once the Lease is taken.
	var taken atomic.Bool
	kc := clients.Kube.(*fake.Clientset)
	kc.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !taken.Load() {
			return false, nil, nil
		}
		other, long := "other-replica", int32(3600)
		return true, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "cma", Namespace: "home", ResourceVersion: "2"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &other, LeaseDurationSeconds: &long, RenewTime: &metav1.MicroTime{Time: time.Now()}}}, nil
	})
	kc.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !taken.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), "cma", errors.New("the object has been modified"))
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o, clients) }()

	leases := clients.Kube.CoordinationV1().Leases("home")
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := leases.Get(ctx, "cma", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			break
		}
		if time.Now().After(deadline) {
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Fatal("Run never took the Lease")
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v before it took the Lease", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Another replica holds the Lease now, renewed for far longer than our deadlines: the API server
	// shows it so, and refuses our renewals as it would (a conflict: the Lease changed since we read it).
	taken.Store(true)
	select {
	case err := <-done:
		if !errors.Is(err, ErrLostLease) {
			t.Fatalf("Run returned %v, want ErrLostLease", err)
		}
	case <-time.After(30 * time.Second):
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		t.Fatal("Run still running 30 s after another holder took the Lease: the replica hangs, leading nothing")
	}
}
