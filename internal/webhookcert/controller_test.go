package webhookcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// fakeTarget stands for the webhook configuration: it keeps the caBundle it was given.
type fakeTarget struct {
	kube    *kubefake.Clientset
	applied int
}

func (f *fakeTarget) Bundle(live *admissionregistrationv1.MutatingWebhookConfiguration) []byte {
	if live == nil || len(live.Webhooks) == 0 {
		return nil
	}
	return live.Webhooks[0].ClientConfig.CABundle
}

func (f *fakeTarget) Apply(ctx context.Context, live *admissionregistrationv1.MutatingWebhookConfiguration, ca []byte) (bool, error) {
	if live != nil && bytes.Equal(f.Bundle(live), ca) {
		return false, nil
	}
	f.applied++
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cma"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "w", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca}}}}
	client := f.kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if live == nil {
		_, err := client.Create(ctx, cfg, metav1.CreateOptions{})
		return true, err
	}
	cfg.ResourceVersion = live.ResourceVersion
	_, err := client.Update(ctx, cfg, metav1.UpdateOptions{})
	return true, err
}

type harness struct {
	t       *testing.T
	kube    *kubefake.Clientset
	target  *fakeTarget
	serving *Serving
	ctl     *Controller
	inf     *Informers
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube := kubefake.NewClientset()
	inf := NewInformers(kube, "kube-system", "cma-webhook-tls", "cma")
	s := NewServing()
	target := &fakeTarget{kube: kube}
	if err := inf.Serve(s, target); err != nil {
		t.Fatal(err)
	}
	ctl, err := NewController(kube, inf, s, target, metrics.New(), Options{Namespace: "kube-system", Secret: "cma-webhook-tls",
		Configuration: "cma", Hosts: []string{"127.0.0.1"}, Validity: time.Hour, OwnsConfiguration: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, kube: kube, target: target, serving: s, ctl: ctl, inf: inf}
}

// sync runs one sync once the informers have caught up with every write so far.
func (h *harness) sync() {
	h.t.Helper()
	h.settle()
	if _, err := h.ctl.sync(context.Background(), key); err != nil {
		h.t.Fatal(err)
	}
	h.settle()
}

// settle waits until the informers hold what the fake API server holds.
func (h *harness) settle() {
	h.t.Helper()
	ctx := context.Background()
	same := func() bool {
		var api, cached [2]any
		if s, err := h.kube.CoreV1().Secrets("kube-system").Get(ctx, "cma-webhook-tls", metav1.GetOptions{}); err == nil {
			api[0] = s
		}
		if c, err := h.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "cma", metav1.GetOptions{}); err == nil {
			api[1] = c
		}
		cached[0], _, _ = h.inf.Secrets.GetStore().GetByKey("kube-system/cma-webhook-tls")
		cached[1], _, _ = h.inf.Configuration.GetStore().GetByKey("cma")
		return equality.Semantic.DeepEqual(api, cached)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if same() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatal("the informers did not catch up")
}

func (h *harness) writes() int {
	n := 0
	for _, a := range h.kube.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			n++
		}
	}
	return n
}

// First sync: the Secret and the caBundle; then nothing, however often it runs; a wiped caBundle comes
// back at the next sync; every replica (here, this one) serves what the Secret holds.
func TestTheControllerMakesTheSecretRegistersTheBundleAndRestoresAWipe(t *testing.T) {
	h := newHarness(t)
	h.sync()
	s, err := h.kube.CoreV1().Secrets("kube-system").Get(context.Background(), "cma-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no Secret after the first sync: %v", err)
	}
	cfg, err := h.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "cma", metav1.GetOptions{})
	if err != nil || !bytes.Equal(cfg.Webhooks[0].ClientConfig.CABundle, s.Data["ca.crt"]) {
		t.Fatalf("the registered caBundle is not the Secret's ca.crt: %v", err)
	}
	if h.serving.Ready() {
		t.Fatal("Ready the moment its new caBundle is registered: kube-apiserver may not have it yet")
	}
	h.serving.now = func() time.Time { return time.Now().Add(readySettle) }
	if !h.serving.Ready() {
		t.Fatal("the leader does not serve the certificate it stored")
	}
	leaf := h.serving.current.Load().Leaf
	if err := verifies(leaf, ParseBundle(cfg.Webhooks[0].ClientConfig.CABundle), "127.0.0.1", time.Now()); err != nil {
		t.Fatalf("the served certificate does not verify against the registered caBundle: %v", err)
	}
	before := h.writes()
	h.sync()
	h.sync()
	if got := h.writes() - before; got != 0 {
		t.Fatalf("steady state: %d writes; want none: %v", got, h.kube.Actions()[len(h.kube.Actions())-got:])
	}

	cfg.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := h.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(context.Background(), cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync()
	cfg, _ = h.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "cma", metav1.GetOptions{})
	if !bytes.Equal(cfg.Webhooks[0].ClientConfig.CABundle, s.Data["ca.crt"]) {
		t.Fatal("a wiped caBundle was not restored")
	}
}

// The Secret deleted: a new CA joins the old one in the bundle, and the certificate served stays the
// old one until the new CA may sign.
func TestADeletedSecretRotatesTheCAWithoutChangingWhatIsServed(t *testing.T) {
	h := newHarness(t)
	h.sync()
	served := h.serving.current.Load().Leaf
	if err := h.kube.CoreV1().Secrets("kube-system").Delete(context.Background(), "cma-webhook-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync()
	s, err := h.kube.CoreV1().Secrets("kube-system").Get(context.Background(), "cma-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Secret was not written again: %v", err)
	}
	if n := len(ParseBundle(s.Data["ca.crt"])); n != 2 || len(s.Data["ca-next.key"]) == 0 {
		t.Fatalf("after the deletion the bundle holds %d CAs (next key: %v); want the old and a new one pending", n, len(s.Data["ca-next.key"]) > 0)
	}
	if !h.serving.current.Load().Leaf.Equal(served) {
		t.Fatal("the served certificate changed before its new CA was registered")
	}
	var updates int
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "mutatingwebhookconfigurations" {
			updates++
		}
	}
	if updates != 1 {
		t.Fatalf("%d caBundle updates; want the one adding the new CA", updates)
	}
}

// A Secret emptied of its serving certificate, or holding an expired one, leaves the last good one
// served.
func TestServingKeepsTheLastGoodCertificate(t *testing.T) {
	a, err := plan(state{now: time.Now(), stored: &authority{}, propagated: never, hosts: hosts, validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	data, err := a.write.data()
	if err != nil {
		t.Fatal(err)
	}
	s := NewServing()
	if s.Ready() {
		t.Fatal("ready before any certificate")
	}
	s.Load(&corev1.Secret{Data: data})
	if !s.Ready() || !s.current.Load().Leaf.Equal(a.write.serving.Leaf) {
		t.Fatal("the Secret's certificate is not served")
	}
	s.Load(&corev1.Secret{Data: map[string][]byte{"ca.crt": data["ca.crt"], "tls.crt": {}, "tls.key": {}}})
	s.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	s.Load(&corev1.Secret{Data: data})
	if !s.current.Load().Leaf.Equal(a.write.serving.Leaf) {
		t.Fatal("an emptied Secret or an expired pair replaced the served certificate")
	}
	m := metrics.New()
	s.Report(m)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "configmap_attacher_webhook_certificate_expiry_timestamp_seconds" {
			if got, want := f.GetMetric()[0].GetGauge().GetValue(), float64(a.write.serving.Leaf.NotAfter.Unix()); got != want {
				t.Fatalf("expiry gauge %v; want the served certificate's NotAfter %v", got, want)
			}
			return
		}
	}
	t.Fatal("no expiry gauge")
}

// A configuration we own is made at the first sync; deleted afterwards (an uninstall takes the webhook
// out of the pod path that way), it is not made again.
func TestADeletedConfigurationIsNotMadeAgain(t *testing.T) {
	h := newHarness(t)
	h.sync()
	if h.target.applied != 1 {
		t.Fatalf("first sync: %d applies; want the configuration made", h.target.applied)
	}
	if err := h.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "cma", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync()
	h.sync()
	if _, err := h.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "cma", metav1.GetOptions{}); err == nil || h.target.applied != 1 {
		t.Fatalf("a deleted configuration was made again (%d applies)", h.target.applied)
	}
}

// A replica starting while the Secret holds a certificate serves it by the time Run returns, before
// the webhook listens: the informer's cache alone is not enough, its handlers must have been called.
func TestAReplicaServesTheStoredCertificateOnceRunReturns(t *testing.T) {
	first := newHarness(t)
	first.sync()
	stored, err := first.kube.CoreV1().Secrets("kube-system").Get(context.Background(), "cma-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := first.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "cma", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		kube := kubefake.NewClientset(stored.DeepCopy(), cfg.DeepCopy())
		inf := NewInformers(kube, "kube-system", "cma-webhook-tls", "cma")
		s := NewServing()
		if err := inf.Serve(s, &fakeTarget{kube: kube}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := inf.Run(ctx); err != nil {
			t.Fatal(err)
		}
		ready := s.Ready()
		cancel()
		if !ready {
			t.Fatal("Run returned before the stored certificate was served")
		}
	}
}

// A certificate whose CA is not in the registered caBundle yet never replaces one that is: the API
// server would refuse it. It is taken once the bundle trusts it (the caBundle's update, or the re-check).
func TestServingNeverTradesATrustedCertificateForOneNotRegisteredYet(t *testing.T) {
	now := time.Now()
	a := installed(t, time.Hour)
	other, err := plan(state{now: now, stored: &authority{}, propagated: never, hosts: hosts, validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b := other.write
	registered := a.bundle
	s := NewServing()
	s.registered = func() ([]*x509.Certificate, bool) { return registered, true }
	now = t0.Add(time.Minute)
	s.now = func() time.Time { return now }
	s.observe(registered, true)
	s.Load(secretOf(t, a))
	s.Load(secretOf(t, b))
	if !s.current.Load().Leaf.Equal(a.serving.Leaf) || !s.Ready() {
		t.Fatal("a trusted certificate was replaced by one the registered caBundle does not verify")
	}
	s.secret = func() *corev1.Secret { return secretOf(t, b) }
	registered = append(slices.Clone(a.bundle), b.bundle...)
	s.observe(registered, false)
	s.recheck()
	now = now.Add(readySettle)
	if !s.current.Load().Leaf.Equal(b.serving.Leaf) || !s.Ready() {
		t.Fatal("the new certificate was not taken once its CA was registered")
	}
	registered = a.bundle
	if s.Ready() {
		t.Fatal("ready while serving a certificate the registered caBundle does not verify")
	}
}

// Ready (its table in serving.go): a certificate only a CA just registered signs waits readySettle
// after this replica's cache showed the CA; one registered before the replica started does not wait.
func TestReadyWaitsUntilANewlyRegisteredCAHasSettled(t *testing.T) {
	a := installed(t, time.Hour)
	other := installed(t, time.Hour)
	at := t0.Add(time.Minute)
	cases := []struct {
		name string
		// serve: the Secret's content the replica loads (nil: none); bundle: the registered caBundle,
		// nil with configured false for no configuration; shown: how long before at the cache showed it,
		// initial for its first list.
		serve      *authority
		configured bool
		bundle     []*x509.Certificate
		initial    bool
		shown      time.Duration
		expired    bool
		want       bool
	}{
		{name: "no certificate served", configured: true, bundle: a.bundle, initial: true, want: false},
		{name: "served, expired by this clock", serve: a, configured: true, bundle: a.bundle, initial: true, expired: true, want: false},
		{name: "served, no configuration: no pod is sent here", serve: a, want: true},
		{name: "served, the bundle holds another CA only", serve: a, configured: true, bundle: other.bundle, initial: true, want: false},
		{name: "served, its CA in the first list", serve: a, configured: true, bundle: a.bundle, initial: true, want: true},
		{name: "served, its CA shown just now", serve: a, configured: true, bundle: a.bundle, shown: 0, want: false},
		{name: "served, its CA shown a second ago", serve: a, configured: true, bundle: a.bundle, shown: time.Second, want: false},
		{name: "served, its CA shown two seconds ago", serve: a, configured: true, bundle: a.bundle, shown: 2 * time.Second, want: true},
		{name: "served, its CA shown long ago beside a new one", serve: a, configured: true, bundle: append(slices.Clone(a.bundle), other.bundle...), shown: time.Hour, want: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewServing()
			s.registered = func() ([]*x509.Certificate, bool) { return c.bundle, c.configured }
			now := at.Add(-c.shown)
			s.now = func() time.Time { return now }
			if c.configured {
				s.observe(c.bundle, c.initial)
			}
			if c.serve != nil {
				s.Load(secretOf(t, c.serve))
			}
			now = at
			if c.expired {
				now = at.Add(2 * time.Hour)
			}
			if got := s.Ready(); got != c.want {
				t.Fatalf("Ready() = %v; want %v", got, c.want)
			}
		})
	}
}
