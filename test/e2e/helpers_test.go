//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// logWriter sends narration to the test log, so `go test -v` shows the story step by step.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// givenNamespace creates a fresh namespace for one test and deletes it afterwards.
func givenNamespace(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	// A leftover from an interrupted or failed run would make the story start from the middle.
	releaseAndDelete(t, ns)
	if err := framework.Eventually(ctx, 2*time.Minute, "namespace "+ns+" to be gone", func(ctx context.Context) (bool, string, error) {
		_, err := e2e.cluster.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "terminating", nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e2e.cluster.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() { // a failed story's namespace is kept for a look; the next run removes it
			logWarnings(t, ns)
			return
		}
		releaseAndDelete(t, ns)
	})
	return ns
}

// lastSeen is when an Event last happened: events.k8s.io writers set eventTime only.
func lastSeen(e corev1.Event) time.Time {
	if e.LastTimestamp.IsZero() {
		return e.EventTime.Time
	}
	return e.LastTimestamp.Time
}

// logWarnings logs the namespace's last Warning events: on CI, where the namespace is not kept, they
// often say why a story waited in vain (a pod refused, unschedulable, a failed sync).
func logWarnings(t *testing.T, ns string) {
	t.Helper()
	list, err := e2e.cluster.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		t.Logf("the Warning events of namespace %s: %v", ns, err)
		return
	}
	events := list.Items
	slices.SortFunc(events, func(a, b corev1.Event) int { return lastSeen(a).Compare(lastSeen(b)) })
	events = events[max(0, len(events)-15):]
	for _, e := range events {
		t.Logf("Warning event in %s: %s %s/%s: %s (×%d, last %s)", ns, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name,
			e.Message, max(e.Count, 1), lastSeen(e).UTC().Format(time.TimeOnly))
	}
	t.Logf("the namespace %s had %d Warning events (the last %d above)", ns, len(list.Items), len(events))
}

// releaseAndDelete does what uninstall does, then deletes the namespace: objects carrying our finalizer
// would otherwise wait for a controller the test has stopped.
func releaseAndDelete(t *testing.T, ns string) {
	if r := e2e.bin.Run(context.Background(), nil, "release", "-n", ns); r.Code != 0 {
		t.Logf("release -n %s: %s", ns, r)
	}
	if err := e2e.cluster.DeleteNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
}

// story returns a walkthrough story in a fresh namespace.
func story(t *testing.T, ns string, a walkthrough.Attacher) *walkthrough.Story {
	return &walkthrough.Story{
		C: e2e.cluster, Attacher: a, Namespace: givenNamespace(t, ns), Rollout: "demo",
		Out: logWriter{t}, Wait: 90 * time.Second,
	}
}

// startController runs `configmap-attacher controller` scoped to namespaces, for the test's lifetime.
func startController(t *testing.T, extraArgs []string, namespaces ...string) *framework.Process {
	t.Helper()
	args := append([]string{"controller", "-namespaces", strings.Join(namespaces, ","), "-leader-elect=false",
		"-metrics-bind-address", "127.0.0.1:0", "-health-probe-bind-address", "127.0.0.1:0"}, extraArgs...)
	p, err := e2e.bin.Start(context.Background(), nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("controller logs:\n%s", p.Logs())
		}
	})
	return p
}

func jobAttacher() *walkthrough.Job { return &walkthrough.Job{Bin: e2e.bin} }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// promotePaused promotes the canary of Rollout ns/name once it is paused (framework.PromotePaused).
func promotePaused(t *testing.T, ns, name string) {
	t.Helper()
	must(t, e2e.cluster.PromotePaused(context.Background(), 2*time.Minute, ns, name))
}
