package webhookcert

import (
	"bytes"
	"crypto/tls"
	"errors"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// Serving is what every replica serves: the serving certificate the Secret holds, loaded from the
// watch the moment it changes. It never drops a certificate for nothing: a Secret deleted, emptied or
// holding an expired pair leaves the last good one served until the leader stores another.
type Serving struct {
	now     func() time.Time
	current atomic.Pointer[tls.Certificate]
	// known is the last Secret content with a bundle, CA keys included: the leader's memory if the
	// Secret is lost.
	known atomic.Pointer[authority]
}

// NewServing returns a Serving with nothing loaded yet.
func NewServing() *Serving { return &Serving{now: time.Now} }

// Load takes what s holds.
func (s *Serving) Load(secret *corev1.Secret) {
	a := parseSecret(secret)
	if len(a.bundle) > 0 {
		s.known.Store(a)
	}
	pair := a.serving
	if pair == nil || s.now().Before(pair.Leaf.NotBefore) || !s.now().Before(pair.Leaf.NotAfter) {
		return
	}
	if cur := s.current.Load(); cur != nil && bytes.Equal(cur.Leaf.Raw, pair.Leaf.Raw) {
		return
	}
	s.current.Store(pair)
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cur := s.current.Load(); cur != nil {
		return cur, nil
	}
	return nil, errNoCertificate
}

var errNoCertificate = errors.New("no webhook serving certificate yet: the leader stores one in the certificate Secret")

// Ready reports whether a certificate is served: a replica without one must get no traffic.
func (s *Serving) Ready() bool { return s.current.Load() != nil }

// NotAfter is when the certificate served now expires; zero before one is loaded.
func (s *Serving) NotAfter() time.Time {
	if cur := s.current.Load(); cur != nil {
		return cur.Leaf.NotAfter
	}
	return time.Time{}
}

// Report exports the served certificate's expiry: it is replaced when two thirds of its life have
// passed, so an alert on too few days left means renewal has been failing.
func (s *Serving) Report(m *metrics.Metrics) {
	m.Gauge("configmap_attacher_webhook_certificate_expiry_timestamp_seconds",
		"When the pinning webhook's serving certificate expires (Unix seconds); replaced when two thirds of its life have passed.",
		func() float64 {
			if t := s.NotAfter(); !t.IsZero() {
				return float64(t.Unix())
			}
			return 0
		})
}

// knownAuthority is the last Secret content with a bundle; nil before one.
func (s *Serving) knownAuthority() *authority { return s.known.Load() }
