package webhookcert

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// RecheckPeriod is how often every replica looks at the Secret again, whatever events came: a watch
// event can be late or lost, and a certificate passed over once (its CA not registered yet) must be
// taken as soon as it may be. Cheap: a cache read and a comparison.
const RecheckPeriod = 10 * time.Second

// Serving is what every replica serves: the serving certificate the Secret holds, loaded from the
// watch the moment it changes and at every RecheckPeriod. It never drops a certificate for nothing: a
// Secret deleted, emptied or holding an expired pair leaves the last good one served until the leader
// stores another; and it never trades a certificate the registered caBundle trusts for one it does not
// trust yet.
//
// Its own clock only tells expired certificates: a certificate "not valid yet" by a clock behind the
// leader's is served all the same (the API servers verify with their clocks, and certificates are
// backdated an hour).
type Serving struct {
	now     func() time.Time
	current atomic.Pointer[tls.Certificate]
	// known is the last Secret content with a bundle, CA keys included: the leader's memory if the
	// Secret is lost.
	known atomic.Pointer[authority]
	// registered is the caBundle the webhook configuration holds, as this replica's cache shows it;
	// exists is false when there is no configuration. Nil (tests, before Informers.Serve): every
	// certificate counts as trusted.
	registered func() (bundle []*x509.Certificate, exists bool)
	// secret is the Secret as cached, for the periodic re-check; nil before Informers.Serve.
	secret func() *corev1.Secret
	// since is when this replica's cache first showed each registered CA (by fingerprint),
	// continuously; the zero time for a CA its first list showed (registered before this process
	// started). Ready reads it.
	sinceMu sync.Mutex
	since   firstSeen
	// loading serializes Load: the watch, the re-check and the leader's own writes all call it.
	loading sync.Mutex
	// loaded is closed once a certificate is served.
	loaded     chan struct{}
	loadedOnce sync.Once
}

// NewServing returns a Serving with nothing loaded yet.
func NewServing() *Serving {
	return &Serving{now: time.Now, loaded: make(chan struct{}), since: firstSeen{}}
}

// readySettle is how long a CA must have been in the registered caBundle, as this replica's cache
// shows it, before a certificate it alone signs makes the replica Ready. kube-apiserver reads the
// configuration through an informer of its own: a bundle just registered (a first install, a
// reinstall beside a configuration left behind) reaches its webhook client a moment after ours, and a
// pod sent to a replica Ready that moment was refused (x509: unknown authority), 10 ms after Ready on
// a loaded control plane. Unlike caPropagation, nothing served waits for it: it delays only the first
// Ready of a new bundle.
const readySettle = 2 * time.Second

// firstSeen is when each registered CA (by fingerprint) was first seen in the caBundle, continuously.
type firstSeen map[string]time.Time

// update records the bundle seen at now: a CA new to it at now, a CA no longer in it forgotten.
func (f firstSeen) update(bundle []*x509.Certificate, now time.Time) {
	in := make(map[string]bool, len(bundle))
	for _, ca := range bundle {
		fp := Fingerprint(ca)
		in[fp] = true
		if _, ok := f[fp]; !ok {
			f[fp] = now
		}
	}
	for fp := range f {
		if !in[fp] {
			delete(f, fp)
		}
	}
}

// observe records the caBundle the configuration holds as this replica's cache delivers it; initial:
// its first list (the CAs it shows were registered before this process started: the zero time).
func (s *Serving) observe(bundle []*x509.Certificate, initial bool) {
	now := s.now()
	if initial {
		now = time.Time{}
	}
	s.sinceMu.Lock()
	defer s.sinceMu.Unlock()
	s.since.update(bundle, now)
}

// Load takes what secret holds, if it should be served.
func (s *Serving) Load(secret *corev1.Secret) {
	s.loading.Lock()
	defer s.loading.Unlock()
	a := parseSecret(secret)
	if len(a.bundle) > 0 {
		s.known.Store(a)
	}
	pair := a.serving
	now := s.now()
	if pair == nil || !now.Before(pair.Leaf.NotAfter) {
		return
	}
	cur := s.current.Load()
	if cur != nil && bytes.Equal(cur.Leaf.Raw, pair.Leaf.Raw) {
		return
	}
	if cur != nil && now.Before(cur.Leaf.NotAfter) && s.trusted(cur.Leaf) && !s.trusted(pair.Leaf) {
		return // the next re-check, or the caBundle's update, takes it once registered
	}
	s.current.Store(pair)
	s.loadedOnce.Do(func() { close(s.loaded) })
}

// recheck loads the Secret as cached again.
func (s *Serving) recheck() {
	if s.secret == nil {
		return
	}
	if secret := s.secret(); secret != nil {
		s.Load(secret)
	}
}

// trusted reports whether the registered caBundle verifies leaf; with no configuration (or none
// known) nothing can be checked, and leaf counts as trusted.
func (s *Serving) trusted(leaf *x509.Certificate) bool {
	return s.trustedBy(leaf, func(*x509.Certificate) bool { return true })
}

// trustedBy reports whether a registered CA for which ok holds verifies leaf, as trusted does.
func (s *Serving) trustedBy(leaf *x509.Certificate, ok func(ca *x509.Certificate) bool) bool {
	if s.registered == nil {
		return true
	}
	bundle, exists := s.registered()
	if !exists {
		return true
	}
	return slices.ContainsFunc(bundle, func(ca *x509.Certificate) bool { return signedBy(leaf, ca) && ok(ca) })
}

// settled reports whether ca has been in the registered caBundle for readySettle, as observe saw it.
func (s *Serving) settled(ca *x509.Certificate, now time.Time) bool {
	s.sinceMu.Lock()
	defer s.sinceMu.Unlock()
	t, ok := s.since[Fingerprint(ca)]
	return ok && now.Sub(t) >= readySettle
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cur := s.current.Load(); cur != nil {
		return cur, nil
	}
	return nil, errNoCertificate
}

var errNoCertificate = errors.New("no webhook serving certificate yet: the leader stores one in the certificate Secret")

// Loaded is closed once a certificate is served: the webhook accepts no connection before, since a
// handshake without a certificate can only fail.
func (s *Serving) Loaded() <-chan struct{} { return s.loaded }

// Ready reports whether this replica may get traffic (no refusal once Ready):
//
//	certificate served                  webhook configuration   a registered CA that signs it         Ready
//	none, or expired by this clock      any                     any                                   no
//	yes                                 none                    -                                     yes: no pod is sent here
//	yes                                 exists                  none                                  no
//	yes                                 exists                  shown by the first list, or for       yes
//	                                                            readySettle since
//	yes                                 exists                  shown for less than readySettle       not yet
func (s *Serving) Ready() bool {
	cur := s.current.Load()
	now := s.now()
	return cur != nil && now.Before(cur.Leaf.NotAfter) &&
		s.trustedBy(cur.Leaf, func(ca *x509.Certificate) bool { return s.settled(ca, now) })
}

// NotAfter is when the certificate served now expires; zero before one is loaded.
func (s *Serving) NotAfter() time.Time {
	if cur := s.current.Load(); cur != nil {
		return cur.Leaf.NotAfter
	}
	return time.Time{}
}

// Report exports when the served certificate expires and when the leader should have replaced it (two
// thirds of its life): an alert compares the two, whatever the configured validity.
func (s *Serving) Report(m *metrics.Metrics) {
	leaf := func(at func(*x509.Certificate) time.Time) func() float64 {
		return func() float64 {
			if cur := s.current.Load(); cur != nil {
				return float64(at(cur.Leaf).Unix())
			}
			return 0
		}
	}
	m.Gauge("configmap_attacher_webhook_certificate_expiry_timestamp_seconds",
		"When the pinning webhook's serving certificate expires (Unix seconds); 0 while none is served.",
		leaf(func(c *x509.Certificate) time.Time { return c.NotAfter }))
	m.Gauge("configmap_attacher_webhook_certificate_renewal_timestamp_seconds",
		"When the leader replaces the served certificate (two thirds of its life, Unix seconds); 0 while none is served. Past it, renewal is failing.",
		leaf(renewAt))
}

// knownAuthority is the last Secret content with a bundle; nil before one.
func (s *Serving) knownAuthority() *authority { return s.known.Load() }
