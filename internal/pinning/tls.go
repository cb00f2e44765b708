package pinning

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// renewBefore is how long before it expires a serving certificate is replaced (they last a year).
const renewBefore = 30 * 24 * time.Hour

// Certs manages the webhook's serving certificate: a CA and a certificate it signed for Hosts, made by
// client-go's util/cert (what kube-apiserver uses for its own self-signed serving certificate; it
// signs IP addresses, which a webhook on https://127.0.0.1:PORT needs), kept in a Secret so every
// replica serves the same certificate and one caBundle fits them all.
type Certs struct {
	Kube      kubernetes.Interface
	Namespace string
	Secret    string
	// Hosts are the names the API server dials: DNS names or IP addresses.
	Hosts []string

	current atomic.Pointer[tls.Certificate]
	ca      atomic.Pointer[[]byte]
}

// Ensure loads a valid certificate from the Secret, or makes one (and the Secret): another replica
// may win the race to create it, and then its certificate is the one used.
func (c *Certs) Ensure(ctx context.Context) error {
	secrets := c.Kube.CoreV1().Secrets(c.Namespace)
	s, err := secrets.Get(ctx, c.Secret, metav1.GetOptions{})
	switch {
	case err == nil && c.valid(s):
		return c.load(s)
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the webhook certificate Secret %s/%s: %w", c.Namespace, c.Secret, err)
	}
	fresh, err := c.generate()
	if err != nil {
		return err
	}
	if s == nil || s.ResourceVersion == "" {
		_, err = secrets.Create(ctx, fresh, metav1.CreateOptions{FieldManager: api.FieldManager})
	} else {
		fresh.ResourceVersion = s.ResourceVersion
		_, err = secrets.Update(ctx, fresh, metav1.UpdateOptions{FieldManager: api.FieldManager})
	}
	if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
		return c.Ensure(ctx) // another replica wrote one meanwhile: use it
	}
	if err != nil {
		return fmt.Errorf("writing the webhook certificate Secret %s/%s: %w", c.Namespace, c.Secret, err)
	}
	logging.FromContext(ctx).Info("made a webhook serving certificate", "secret", c.Namespace+"/"+c.Secret, "hosts", c.Hosts)
	return c.load(fresh)
}

// Renew re-runs Ensure daily until ctx ends, so a certificate near its end is replaced in time;
// onChange is told the CA of a new certificate (to update the caBundle).
func (c *Certs) Renew(ctx context.Context, onChange func(ctx context.Context, ca []byte) error) {
	t := time.NewTicker(24 * time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := c.CA()
		if err := c.Ensure(ctx); err != nil {
			logging.FromContext(ctx).Error("renewing the webhook certificate", "err", err)
			continue
		}
		if after := c.CA(); !bytes.Equal(before, after) {
			if err := onChange(ctx, after); err != nil {
				logging.FromContext(ctx).Error("updating the webhook caBundle", "err", err)
			}
		}
	}
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cur := c.current.Load(); cur != nil {
		return cur, nil
	}
	return nil, fmt.Errorf("no webhook certificate yet")
}

// NotAfter is when the certificate served now expires; zero before Ensure.
func (c *Certs) NotAfter() time.Time {
	if cur := c.current.Load(); cur != nil && cur.Leaf != nil {
		return cur.Leaf.NotAfter
	}
	return time.Time{}
}

// Report exports the served certificate's expiry: Renew replaces it 30 days ahead, so an alert on
// fewer days left means renewal has been failing. Call it after Ensure.
func (c *Certs) Report(m *metrics.Metrics) {
	m.Gauge("configmap_attacher_webhook_certificate_expiry_timestamp_seconds",
		"When the pinning webhook's serving certificate expires (Unix seconds); renewed 30 days ahead.",
		func() float64 { return float64(c.NotAfter().Unix()) })
}

// CA is the PEM of the CA that signed the serving certificate: the webhook configuration's caBundle.
func (c *Certs) CA() []byte {
	if ca := c.ca.Load(); ca != nil {
		return *ca
	}
	return nil
}

func (c *Certs) generate() (*corev1.Secret, error) {
	var ips []net.IP
	var dns []string
	for _, h := range c.Hosts[1:] {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	chain, key, err := cert.GenerateSelfSignedCertKey(c.Hosts[0], ips, dns)
	if err != nil {
		return nil, fmt.Errorf("making the webhook certificate: %w", err)
	}
	// The chain is the serving certificate, then the CA that signed it.
	serving, rest := pem.Decode(chain)
	if serving == nil || len(bytes.TrimSpace(rest)) == 0 {
		return nil, fmt.Errorf("making the webhook certificate: unexpected chain")
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: c.Secret, Namespace: c.Namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: key, "ca.crt": bytes.TrimSpace(rest)},
	}, nil
}

// valid reports whether the Secret holds a certificate for every host that is not near its end.
func (c *Certs) valid(s *corev1.Secret) bool {
	certs, err := cert.ParseCertsPEM(s.Data[corev1.TLSCertKey])
	if err != nil || len(certs) == 0 || len(s.Data["ca.crt"]) == 0 {
		return false
	}
	leaf := certs[0]
	if time.Until(leaf.NotAfter) < renewBefore {
		return false
	}
	for _, h := range c.Hosts {
		if !covers(leaf, h) {
			return false
		}
	}
	return true
}

func covers(leaf *x509.Certificate, host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return slices.ContainsFunc(leaf.IPAddresses, ip.Equal)
	}
	return leaf.VerifyHostname(host) == nil
}

func (c *Certs) load(s *corev1.Secret) error {
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("the webhook certificate Secret %s/%s: %w", c.Namespace, c.Secret, err)
	}
	ca := s.Data["ca.crt"]
	c.current.Store(&pair)
	c.ca.Store(&ca)
	return nil
}
