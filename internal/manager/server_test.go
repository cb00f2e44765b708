package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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

// The webhook server speaks HTTP/2 (whose shutdown is a GOAWAY) and, once told to stop, answers
// every request with "Connection: close" while it drains: kube-apiserver then never sends a request
// on a connection the server is closing (it does not retry a POST, so under Fail a pod would be
// refused).
func TestWebhookServerClosesConnectionsOnlyAfterAnAnswerWhileDraining(t *testing.T) {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	stopped, err := serveTLS(ctx, "webhook", addr, ok, &tls.Config{Certificates: []tls.Certificate{pair}}, 2*time.Second)
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
