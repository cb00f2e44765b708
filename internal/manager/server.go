package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// probes answer /healthz (the process works; for the leader, its Lease is being renewed) and /readyz
// (caches synced, or standing by as a non-leader).
type probes struct {
	ready       func() bool
	leaderCheck *leaderelection.HealthzAdaptor
}

func (p *probes) healthz(w http.ResponseWriter, r *http.Request) {
	if p.leaderCheck != nil {
		if err := p.leaderCheck.Check(r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

func (p *probes) readyz(w http.ResponseWriter, _ *http.Request) {
	if !p.ready() {
		http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// serve runs an HTTP server on addr until ctx ends; an empty addr disables it.
func serve(ctx context.Context, name, addr string, h http.Handler) (<-chan struct{}, error) {
	return serveTLS(ctx, name, addr, h, nil, 0)
}

// serveTLS is serve over TLS when tlsConfig is set, answering for drain more after ctx ends; the
// channel is closed once it has stopped.
//
// kube-apiserver keeps its connections to a webhook open and sends the next admission request on one
// of them: a connection the server closes while idle can meet a request already on its way, and
// kube-apiserver never retries a POST, so under Fail that pod is refused (seen in
// TestPinningWebhookRollingUpgradeRefusesNoPod). Two things make stopping graceful instead. Over TLS
// the server speaks HTTP/2 as well (ServeTLS offers h2), whose shutdown is a GOAWAY: the client moves
// requests the server did not take to a new connection by itself. And while draining, every response
// says "Connection: close" (a GOAWAY over HTTP/2), so each connection is closed by the server right
// after an answer, never while a request may be in flight, and the client's next request opens a new
// connection, which a Service routes to a ready replica.
func serveTLS(ctx context.Context, name, addr string, h http.Handler, tlsConfig *tls.Config, drain time.Duration) (<-chan struct{}, error) {
	stopped := make(chan struct{})
	if addr == "" {
		close(stopped)
		return stopped, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", name, err)
	}
	var draining atomic.Bool
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if draining.Load() {
				w.Header().Set("Connection", "close")
			}
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         tlsConfig,
	}
	log := logging.FromContext(ctx)
	go func() {
		defer close(stopped)
		<-ctx.Done()
		draining.Store(true)
		if drain > 0 {
			log.Info("still answering while endpoints drop this replica", "server", name, "for", drain)
			time.Sleep(drain)
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		var err error
		if tlsConfig != nil {
			err = srv.ServeTLS(ln, "", "") // the certificate comes from tlsConfig
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server stopped", "server", name, "err", err)
		}
	}()
	log.Info("serving", "server", name, "address", ln.Addr().String())
	return stopped, nil
}

// metricsHandler serves /metrics and, with profiling, Go's runtime profiles under /debug/pprof/ (as
// kube-controller-manager's --profiling does).
func metricsHandler(m *metrics.Metrics, profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func probesHandler(p *probes) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", p.healthz)
	mux.HandleFunc("/readyz", p.readyz)
	return mux
}
