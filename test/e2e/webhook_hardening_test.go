//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The pod path read again as a platform team would: faults that need a second fault, another clock or
// a hostile caller (issue 36).

// leader is the replica holding the Lease, and the Lease's holder identity.
func (r *webhookReplicas) leader(ctx context.Context) (*webhookReplica, string) {
	r.t.Helper()
	var holder string
	must(r.t, framework.Eventually(ctx, 60*time.Second, "a replica to hold the Lease", func(ctx context.Context) (bool, string, error) {
		l, err := e2e.cluster.Kube.CoordinationV1().Leases(r.home).Get(ctx, r.name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false, "no holder", nil
		}
		holder = *l.Spec.HolderIdentity
		return true, "", nil
	}))
	for _, rep := range r.replicas {
		// Its own identity, as it logs it when it starts (a standby names the leader too).
		if logs := rep.p.Logs(); strings.Contains(logs, "identity="+holder) || strings.Contains(logs, `"identity":"`+holder+`"`) {
			return rep, holder
		}
	}
	r.t.Fatalf("no replica of ours is the Lease's holder %q", holder)
	return nil, ""
}

// Two replicas serve the webhook; another holder takes the leader's Lease (an API blip longer than the
// renew deadline, then the other replica's election, compressed). The leader must not stay up leading
// nothing, Running and Ready: it exits non-zero within the renew deadline and its drain (its restart
// stands by). Once the intruder's Lease expires the other replica leads: it renews the serving
// certificate and lifts an in-use protection finalizer.
func TestPinningWebhookLeaderWhoseLeaseIsTakenExitsAndTheOtherLeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "wh-lease")
	home := givenNamespace(t, "wh-lease-home")
	r := givenWebhookReplicas(t, ns, home, 2, 30*time.Second)
	givenPinnedWeb(t, ns)
	old, identity := r.leader(ctx)
	t.Logf("given: two replicas serving the webhook (certificates of 30 s), %s leads as %s", old.backend, identity)

	t.Log("when: another holder writes itself into the Lease, renewed now for 20 s")
	leases := e2e.cluster.Kube.CoordinationV1().Leases(home)
	intruder, duration := "intruder", int32(20)
	// The leader renews every retry period (2 s): an update between its renewals can conflict.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &intruder, &duration, &now, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}))
	taken := time.Now()

	// The renew deadline (10 s), a retry (2 s), the drain at a URL (0 s), and the process's exit.
	must(t, framework.Eventually(ctx, 30*time.Second, "the replica that lost its Lease to exit", func(context.Context) (bool, string, error) {
		return old.p.Exited(), "still running", nil
	}))
	exited := time.Since(taken)
	if old.p.ExitErr() == nil {
		t.Fatalf("the replica that lost its Lease exited 0; want non-zero (its restart stands by):\n%s", old.p.Logs())
	}
	if !strings.Contains(old.p.Logs(), "lost the leader Lease") {
		t.Errorf("its logs do not say it lost the Lease:\n%s", old.p.Logs())
	}
	t.Logf("then: %s exited non-zero %s after the Lease was taken", old.backend, exited.Round(100*time.Millisecond))

	var other *webhookReplica
	for _, rep := range r.replicas {
		if rep != old {
			other = rep
		}
	}
	r.route(other)
	must(t, framework.Eventually(ctx, 60*time.Second, "the other replica to lead", func(ctx context.Context) (bool, string, error) {
		l, err := leases.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, "", err
		}
		h := *l.Spec.HolderIdentity
		return h != intruder && strings.Contains(other.p.Logs(), "identity="+h), "held by " + h, nil
	}))
	leads := time.Now()
	t.Logf("then: %s leads %s after the Lease was taken", other.backend, leads.Sub(taken).Round(100*time.Millisecond))

	secrets := e2e.cluster.Kube.CoreV1().Secrets(home)
	s, err := secrets.Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
	must(t, err)
	served := fingerprint(s.Data["tls.crt"])
	must(t, framework.Eventually(ctx, 60*time.Second, "the new leader to renew the serving certificate", func(ctx context.Context) (bool, string, error) {
		s, err := secrets.Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return fingerprint(s.Data["tls.crt"]) != served, "still " + served, nil
	}))
	r.waitServing(other)

	_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "protected",
		Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, 30*time.Second, "the new leader to protect a new opted-in object", func(ctx context.Context) (bool, string, error) {
		cm, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "protected", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return slices.Contains(cm.Finalizers, api.InUseFinalizer), "no finalizer yet", nil
	}))
	must(t, e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, "protected", metav1.DeleteOptions{}))
	must(t, framework.Eventually(ctx, 30*time.Second, "the new leader to lift the finalizer of the unused object deleted", func(ctx context.Context) (bool, string, error) {
		_, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "protected", metav1.GetOptions{})
		return apierrors.IsNotFound(err), "still there", nil
	}))
	t.Log("then: the new leader renewed the serving certificate and lifted the finalizer of an unused object deleted")
}

// A release reinstalled beside what an uninstall without its hook left: the webhook configuration
// (fail-closed, its caBundle holding the old CA) and the labelled namespace; the certificate Secret is
// not where the new release looks (another namespace). Pods are created from the moment the new
// replicas start. With nothing served anywhere, the first certificate is made and served at once (a CA
// whose key is gone trusts nobody we serve, so nothing waits for a new CA to propagate), and once a
// replica is Ready no pod is refused.
func TestPinningWebhookReinstalledBesideALeftConfigurationServesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "wh-reinstall")
	r := givenWebhookReplicas(t, ns, givenNamespace(t, "wh-reinstall-old"), 2, time.Hour)
	rs := givenPinnedWeb(t, ns)
	for _, rep := range r.replicas {
		rep.p.Kill()
	}
	left := fingerprint(r.caBundle(ctx))
	t.Logf("given: an uninstall without hooks: every replica killed, the configuration %s left (caBundle %s, failurePolicy Fail), %s still labelled for pinning",
		r.name, left, ns)

	t.Log("when: two replicas of the reinstall start in another namespace while a pod of " + rs.Name + " is created every 100 ms")
	r.home = givenNamespace(t, "wh-reinstall-new")
	r.replicas, r.backends, r.procs = nil, nil, nil
	start := time.Now()
	fresh := []*webhookReplica{r.start(time.Hour), r.start(time.Hour)}
	r.route(fresh...)

	var mu sync.Mutex
	var ready time.Time
	readyCtx, stopReady := context.WithCancel(ctx)
	go func() {
		for readyCtx.Err() == nil {
			for _, rep := range fresh {
				if rep.ready() {
					mu.Lock()
					if ready.IsZero() {
						ready = time.Now()
					}
					mu.Unlock()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	type attempt struct {
		at     time.Time
		err    error
		pinned bool
	}
	var attempts []attempt
	for time.Since(start) < 40*time.Second {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-direct-", Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
			Spec: rs.Spec.Template.Spec}
		at := time.Now()
		created, err := e2e.cluster.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		a := attempt{at: at, err: err}
		if err == nil {
			_, reads := refs.FromPodSpec(&created.Spec)[refs.Ref{Kind: refs.ConfigMap, Name: "app-config"}]
			a.pinned = !reads
		}
		attempts = append(attempts, a)
		time.Sleep(100 * time.Millisecond)
	}
	stopReady()
	mu.Lock()
	readyAt := ready
	mu.Unlock()

	var firstAdmitted time.Duration
	var before, after []string
	unpinned := 0
	for _, a := range attempts {
		switch {
		case a.err == nil && firstAdmitted == 0:
			firstAdmitted = a.at.Sub(start)
		}
		if a.err == nil && !a.pinned {
			unpinned++
		}
		if a.err != nil {
			line := fmt.Sprintf("%s: %v", a.at.Sub(start).Round(10*time.Millisecond), a.err)
			if !readyAt.IsZero() && a.at.After(readyAt) {
				after = append(after, line)
			} else {
				before = append(before, line)
			}
		}
	}
	if readyAt.IsZero() {
		t.Fatal("no replica of the reinstall became Ready in 40 s")
	}
	t.Logf("then: %d pod creations; the first admitted %s after the replicas started, the first replica Ready after %s; %d refused before it was Ready",
		len(attempts), firstAdmitted.Round(10*time.Millisecond), readyAt.Sub(start).Round(10*time.Millisecond), len(before))
	for _, b := range before {
		t.Logf("  refused before Ready: %s", b)
	}
	if len(after) > 0 {
		t.Fatalf("%d pod creations refused once a replica was Ready: %s", len(after), strings.Join(after, "; "))
	}
	if firstAdmitted == 0 || firstAdmitted > 20*time.Second {
		t.Fatalf("the first pod admitted %s after the start; want within seconds, not a CA's propagation wait", firstAdmitted)
	}
	if unpinned > 0 {
		t.Fatalf("%d pods admitted unpinned", unpinned)
	}
	if got := fingerprint(r.caBundle(ctx)); got == left {
		t.Fatal("the left caBundle is still registered")
	}
}

// The chart's ValidatingAdmissionPolicy (writePolicy) limits what its ServiceAccount creates: never a
// service-account-token Secret (create with get on Secrets would mint a token for any ServiceAccount),
// and elsewhere than the release namespace only objects labelled as ours. What the controller makes
// (snapshots, its certificate Secret) is still allowed.
func TestChartWritePolicyRefusesAServiceAccountTokenSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-writes")
	appNS := givenNamespace(t, "e2e-writes-app")
	r := installChart(t, "cma-writes", ns, "watchNamespaces={"+appNS+"}", "pinning.enabled=true")
	sa := r.deployment().Spec.Template.Spec.ServiceAccountName
	kc := serviceAccountClient(t, ns, sa)
	t.Logf("given: the chart with pinning (its write policy on by default), acting as its ServiceAccount %s/%s", ns, sa)

	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "minted", Namespace: appNS, Labels: map[string]string{api.SnapshotLabel: api.SnapshotValue},
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}
	// The policy's binding reaches kube-apiserver's policy cache within a moment of the install.
	var err error
	must(t, framework.Eventually(ctx, 30*time.Second, "the write policy to refuse a service-account-token Secret", func(ctx context.Context) (bool, string, error) {
		_, err = kc.CoreV1().Secrets(appNS).Create(ctx, token, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, "admitted", nil
	}))
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "never creates a kubernetes.io/service-account-token Secret") {
		t.Fatalf("creating a service-account-token Secret: %v; want the write policy's refusal", err)
	}
	t.Logf("then: a service-account-token Secret is refused: %v", err)

	unlabelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-ours", Namespace: appNS}}
	if _, err := kc.CoreV1().ConfigMaps(appNS).Create(ctx, unlabelled, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil ||
		!strings.Contains(err.Error(), "creates only its snapshots and records") {
		t.Fatalf("creating an unlabelled ConfigMap in %s: %v; want the write policy's refusal", appNS, err)
	}
	snapshot := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-env-0123456789", Namespace: appNS,
		Labels: map[string]string{api.SnapshotLabel: api.SnapshotValue, api.RevisionedLabel: api.RevisionedValue}}, Type: corev1.SecretTypeOpaque}
	if _, err := kc.CoreV1().Secrets(appNS).Create(ctx, snapshot, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("creating a snapshot Secret: %v; want it allowed", err)
	}
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: r.fullname() + "-webhook-tls", Namespace: ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: {}, corev1.TLSPrivateKeyKey: {}}}
	if _, err := kc.CoreV1().Secrets(ns).Create(ctx, own, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("creating its certificate Secret: %v; want it allowed", err)
	}
	t.Log("then: an unlabelled ConfigMap elsewhere is refused; a snapshot and its own certificate Secret are allowed")
}
