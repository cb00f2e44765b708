package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"

	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

func TestMetricsHandlerServesProfilesOnlyWithProfiling(t *testing.T) {
	tests := []struct {
		name      string
		profiling bool
		path      string
		want      int
	}{
		{"metrics without profiling", false, "/metrics", http.StatusOK},
		{"no profiles without profiling", false, "/debug/pprof/heap", http.StatusNotFound},
		{"no profile index without profiling", false, "/debug/pprof/", http.StatusNotFound},
		{"heap profile with profiling", true, "/debug/pprof/heap", http.StatusOK},
		{"metrics with profiling", true, "/metrics", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			metricsHandler(metrics.New(), tt.profiling).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.want {
				t.Errorf("GET %s: %d, want %d", tt.path, rec.Code, tt.want)
			}
		})
	}
}

// servingPair is a certificate for 127.0.0.1 and the pool that trusts it.
func servingPair(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	return pair, roots
}

// The webhook server, once told to stop, answers every request with "Connection: close" while it
// drains (over HTTP/2, when on, a GOAWAY): kube-apiserver then never sends a request on a connection
// the server is closing (it does not retry a POST, so under Fail a pod would be refused).
func TestWebhookServerClosesConnectionsOnlyAfterAnAnswerWhileDraining(t *testing.T) {
	pair, roots := servingPair(t)
	addr := freeAddr(t)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	stopped, err := server{name: "webhook", addr: addr, handler: ok, tls: &tls.Config{Certificates: []tls.Certificate{pair}}, http2: true, drain: 2 * time.Second}.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	post := func(c *http.Client) *http.Response {
		t.Helper()
		resp, err := c.Post("https://"+addr+"/pin-pods", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	if resp := post(h2); resp.ProtoMajor != 2 {
		t.Errorf("serving: %s, want HTTP/2", resp.Proto)
	}
	if resp := post(h1); resp.Close {
		t.Error("serving: HTTP/1.1 response says Connection: close, want keep-alive")
	}

	stop()
	if resp := post(h1); !resp.Close || resp.StatusCode != http.StatusOK {
		t.Errorf("draining: HTTP/1.1 response %d, Connection: close %t; want 200 and close", resp.StatusCode, resp.Close)
	}
	if resp := post(h2); resp.StatusCode != http.StatusOK {
		t.Errorf("draining: HTTP/2 response %d, want 200", resp.StatusCode)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop within 10 s of its 2 s drain")
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// HTTP/2 is offered only when asked for (-webhook-http2): off, a client that would speak it gets
// HTTP/1.1.
func TestWebhookServerOffersHTTP2OnlyWhenAskedFor(t *testing.T) {
	pair, roots := servingPair(t)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, on := range []bool{false, true} {
		ctx, stop := context.WithCancel(context.Background())
		addr := freeAddr(t)
		if _, err := (server{name: "webhook", addr: addr, handler: ok, tls: &tls.Config{Certificates: []tls.Certificate{pair}}, http2: on}).run(ctx); err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
		resp, err := c.Post("https://"+addr+"/pin-pods", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.ProtoMajor == 2; got != on {
			t.Errorf("http2 %v: the client got %s", on, resp.Proto)
		}
		stop()
	}
}

// Until a certificate is served the webhook does not listen: a connection is refused at once (a
// Service, a load balancer or a proxy tries another replica) instead of meeting a handshake that can
// only fail. A port taken by then ends the process.
func TestWebhookServerListensOnlyOnceItHasACertificate(t *testing.T) {
	pair, roots := servingPair(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addr := freeAddr(t)
	loaded := make(chan struct{})
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	if _, err := (server{name: "webhook", addr: addr, handler: ok, tls: &tls.Config{Certificates: []tls.Certificate{pair}}, listenAfter: loaded}).run(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("a connection was accepted before a certificate was loaded")
	}
	close(loaded)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	var err error
	for range 100 {
		var resp *http.Response
		if resp, err = c.Post("https://"+addr+"/pin-pods", "application/json", strings.NewReader("{}")); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("not answered once the certificate came: %v", err)
	}

	// Taken meanwhile: the failure is reported.
	taken := freeAddr(t)
	later := make(chan struct{})
	failed := make(chan error, 1)
	if _, err := (server{name: "webhook", addr: taken, handler: ok, tls: &tls.Config{Certificates: []tls.Certificate{pair}}, listenAfter: later,
		failed: func(err error) { failed <- err }}).run(ctx); err != nil {
		t.Fatal(err)
	}
	squatter, err := net.Listen("tcp", taken)
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	close(later)
	select {
	case err := <-failed:
		t.Logf("reported: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a port taken by the time of listening was not reported")
	}
}

// At most n requests are handled at once; the next waits for a slot, and one whose client gives up
// while waiting is never handled.
func TestLimitInFlight(t *testing.T) {
	release := make(chan struct{})
	var handled atomic.Int32
	h := limitInFlight(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		handled.Add(1)
		<-release
	}), 2)
	for range 2 {
		go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	}
	for handled.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx)); close(done) }()
	cancel()
	<-done
	if rec.Code != http.StatusServiceUnavailable || handled.Load() != 2 {
		t.Fatalf("a third request whose client gave up: %d, %d handled; want 503 and 2 handled", rec.Code, handled.Load())
	}
	close(release)
}
