// Package webhookcert keeps an admission webhook's TLS working for as long as it is installed: a
// long-lived CA that signs short-lived serving certificates, both kept in one Secret every replica
// follows, and the webhook configuration's caBundle kept equal to the CAs that Secret trusts.
//
// The order of writes is what keeps every pod admission working (Gatekeeper's cert-controller and
// cert-manager's cainjector are the models; this adds the CA's own rollover):
//   - a serving certificate is only ever signed by a CA the API server already trusts (one that has
//     been in the registered caBundle for caPropagation), so a replica that loads it the moment it is
//     stored is never refused;
//   - a new CA joins the bundle beside the old one, and signs only once it has been registered for
//     caPropagation; the old one stays in the bundle until it expires;
//   - serving certificates are replaced when two thirds of their life has passed (cert-manager's
//     default), leaving a third for every replica to load the new one.
//
// Only the leader writes (Controller); every replica serves what the Secret holds (Serving).
package webhookcert

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The Secret's keys. tls.crt and tls.key are the usual ones (type kubernetes.io/tls), so certificate
// exporters and `kubectl describe` read it as any other; the CA's key and the next CA's key are ours.
const (
	keyBundle  = "ca.crt"      // every CA the caBundle holds, oldest first
	keyCAKey   = "ca.key"      // the key of the CA that signs serving certificates (its certificate is in ca.crt)
	keyNextKey = "ca-next.key" // during a CA rollover, the key of the new CA (its certificate is in ca.crt)
)

// backdate is how far before its issue a certificate's NotBefore is set, for clocks behind ours (the API
// servers' verify what we serve with their own clocks): an hour, as client-go's self-signed helpers and
// Gatekeeper's cert-controller do. Lifetimes are measured from the issue (NotBefore + backdate), so a
// 30 s certificate lives 30 s.
const backdate = time.Hour

// caLifetimes is the CA's lifetime in serving certificate lifetimes: a year's certificate, a ten-year CA.
const caLifetimes = 10

// authority is what the Secret holds, parsed. Any part may be missing: a Secret edited or damaged by
// hand is read as far as it goes, and plan repairs what is missing in the safe order.
type authority struct {
	// bundle is ca.crt: every CA a served certificate may be signed by, in the order written.
	bundle []*x509.Certificate
	// signer signs serving certificates (ca.key and its certificate in bundle); nil when absent.
	signer *keyPair
	// next is the new CA of a rollover (ca-next.key and its certificate in bundle); nil otherwise.
	next *keyPair
	// serving is tls.crt/tls.key; nil when absent, unparsable or not a pair.
	serving *tls.Certificate
}

// keyPair is a CA certificate and its private key.
type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// parseSecret reads as much of an authority as s holds; nil s reads as an empty one.
func parseSecret(s *corev1.Secret) *authority {
	a := &authority{}
	if s == nil {
		return a
	}
	a.bundle = ParseBundle(s.Data[keyBundle])
	a.signer = a.pairFor(s.Data[keyCAKey])
	a.next = a.pairFor(s.Data[keyNextKey])
	if a.next != nil && a.signer != nil && a.next.cert.Equal(a.signer.cert) {
		a.next = nil
	}
	if pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); err == nil && pair.Leaf != nil {
		a.serving = &pair
	}
	return a
}

// pairFor finds the bundle's certificate whose public key is keyPEM's.
func (a *authority) pairFor(keyPEM []byte) *keyPair {
	key := parseKey(keyPEM)
	if key == nil {
		return nil
	}
	for _, c := range a.bundle {
		if pub, ok := c.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); ok && pub.Equal(key.Public()) {
			return &keyPair{cert: c, key: key}
		}
	}
	return nil
}

// data is the Secret's content for a.
func (a *authority) data() (map[string][]byte, error) {
	d := map[string][]byte{keyBundle: encodeCerts(a.bundle), corev1.TLSCertKey: {}, corev1.TLSPrivateKeyKey: {}}
	for k, p := range map[string]*keyPair{keyCAKey: a.signer, keyNextKey: a.next} {
		if p == nil {
			continue
		}
		b, err := encodeKey(p.key)
		if err != nil {
			return nil, err
		}
		d[k] = b
	}
	if a.serving != nil {
		var chain []byte
		for _, der := range a.serving.Certificate {
			chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
		key, ok := a.serving.PrivateKey.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("serving key of type %T", a.serving.PrivateKey)
		}
		b, err := encodeKey(key)
		if err != nil {
			return nil, err
		}
		d[corev1.TLSCertKey], d[corev1.TLSPrivateKeyKey] = chain, b
	}
	return d, nil
}

// bundlePEM is the caBundle a webhook configuration carries for a.
func (a *authority) bundlePEM() []byte { return encodeCerts(a.bundle) }

// trusts reports whether c is one of the bundle's CAs.
func (a *authority) trusts(c *x509.Certificate) bool {
	return slices.ContainsFunc(a.bundle, c.Equal)
}

// newCA makes a self-signed CA valid for lifetime from now.
func newCA(now time.Time, lifetime time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making a CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// A name of its own per CA: verification pairs a certificate with its issuer by name first.
		Subject:               pkix.Name{CommonName: fmt.Sprintf("configmap-attacher-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("making a CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

// issue makes a serving certificate for hosts (DNS names or IP addresses), signed by ca, valid for
// lifetime from now but never beyond ca.
func issue(ca *keyPair, hosts []string, now time.Time, lifetime time.Duration) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making a serving key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// issuedAt is when c was made: its NotBefore is backdated. A certificate of an older release was
// backdated less (a minute): when backdate would put its issue at or past its end, its NotBefore is
// taken as the issue, which only renews it a little early.
func issuedAt(c *x509.Certificate) time.Time {
	if t := c.NotBefore.Add(backdate); t.Before(c.NotAfter) {
		return t
	}
	return c.NotBefore
}

// renewAt is when two thirds of c's life have passed: time to replace it.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotAfter.Add(-c.NotAfter.Sub(issuedAt(c)) / 3)
}

// covers reports whether leaf names every host.
func covers(leaf *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
				return false
			}
		} else if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// signedBy reports whether leaf's signature is ca's.
func signedBy(leaf, ca *x509.Certificate) bool {
	return bytes.Equal(leaf.RawIssuer, ca.RawSubject) && leaf.CheckSignatureFrom(ca) == nil
}

// Fingerprint is a certificate's SHA-256, in hex: how logs name CAs.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:8])
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("making a serial number: %w", err)
	}
	return n, nil
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(b)
	return sum[:20]
}

// ParseBundle reads every CERTIFICATE block of b (a caBundle, a Secret's ca.crt), skipping what does
// not parse.
func ParseBundle(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return b
}

func parseKey(b []byte) crypto.Signer {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil
	}
	s, _ := key.(crypto.Signer)
	return s
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// DistrustAnnotation on the certificate Secret lists CAs, by fingerprint, that must sign nothing more
// and leave the caBundle (a leaked CA key): comma-separated SHA-256 fingerprints of the CA certificates,
// hex with or without colons, in full or their first 16 digits (what the logs print).
const DistrustAnnotation = "configmap-attacher.io/distrust-cas"

// ParseDistrust reads DistrustAnnotation's value: lower-case hex prefixes, colons dropped; shorter than
// 16 digits or not hex is ignored (a prefix that short could match a CA nobody meant).
func ParseDistrust(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.ToLower(strings.ReplaceAll(strings.TrimSpace(f), ":", ""))
		if _, err := hex.DecodeString(f); err != nil || len(f) < 16 || len(f) > 64 {
			continue
		}
		out = append(out, f)
	}
	return out
}

// MatchesFingerprint reports whether c's SHA-256 starts with the hex prefix fp.
func MatchesFingerprint(c *x509.Certificate, fp string) bool {
	sum := sha256.Sum256(c.Raw)
	return strings.HasPrefix(hex.EncodeToString(sum[:]), fp)
}
