package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
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
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log := logging.FromContext(ctx)
	go func() {
		defer close(stopped)
		<-ctx.Done()
		if drain > 0 {
			log.Info("still answering while endpoints drop this replica", "server", name, "for", drain)
			time.Sleep(drain)
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
