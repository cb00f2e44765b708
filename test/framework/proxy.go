package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ServiceProxy plays a Service in front of several webhook replicas on one machine: kube-apiserver
// dials one address, each connection goes to the next backend in turn (as kube-proxy spreads
// connections over endpoints), and to the one after if that one does not accept (as a Service drops a
// replica whose pod is gone); bytes pass through untouched (TLS ends at the replica).
type ServiceProxy struct {
	Addr     string
	ln       net.Listener
	backends atomic.Pointer[[]string]
	next     atomic.Uint64
	wg       sync.WaitGroup
}

// StartServiceProxy listens on a free loopback port until ctx ends.
func StartServiceProxy(ctx context.Context, backends ...string) (*ServiceProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &ServiceProxy{Addr: ln.Addr().String(), ln: ln}
	p.SetBackends(backends...)
	go func() { <-ctx.Done(); ln.Close() }()
	go p.accept()
	return p, nil
}

func (p *ServiceProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		first := int(p.next.Add(1) - 1)
		backends := *p.backends.Load()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer in.Close()
			var out net.Conn
			for i := range backends {
				if out, err = net.DialTimeout("tcp", backends[(first+i)%len(backends)], 5*time.Second); err == nil {
					break
				}
			}
			if out == nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if c, ok := dst.(*net.TCPConn); ok {
					_ = c.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(out, in)
			go pipe(in, out)
			<-done
			<-done
		}()
	}
}

// SetBackends changes where new connections go, as a Service's endpoints change: connections open
// stay where they are.
func (p *ServiceProxy) SetBackends(backends ...string) {
	b := slices.Clone(backends)
	p.backends.Store(&b)
}

// Connections is how many connections the proxy has passed on.
func (p *ServiceProxy) Connections() uint64 { return p.next.Load() }

// ServedCertificate is the certificate a TLS server at addr presents, unverified: the caller verifies it.
func ServedCertificate(addr string) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // verified by the caller against a caBundle
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	return certs[0], nil
}

// VerifyServing checks leaf as kube-apiserver checks a webhook's certificate: a chain to caBundle, for host.
func VerifyServing(leaf *x509.Certificate, caBundle []byte, host string) error {
	pool := x509.NewCertPool()
	if len(caBundle) == 0 || !pool.AppendCertsFromPEM(caBundle) {
		return errors.New("empty caBundle")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("serial %s: %w", leaf.SerialNumber, err)
	}
	return nil
}
