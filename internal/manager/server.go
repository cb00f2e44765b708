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
	return server{name: name, addr: addr, handler: h}.run(ctx)
}

// server is one HTTP server of the process: plain for metrics and probes, the webhook over TLS.
type server struct {
	name, addr string
	handler    http.Handler
	// tls, when set, serves HTTPS; http2 offers HTTP/2 there too (off: HTTP/1.1 only).
	tls   *tls.Config
	http2 bool
	// drain is how long it keeps answering after ctx ends.
	drain time.Duration
	// listenAfter, when set, delays listening until it is closed: a TLS server with no certificate
	// yet could only fail every handshake, while a closed port refuses the connection at once, and a
	// Service, a load balancer or a proxy tries another replica. The port is tried at start (a
	// conflict fails early); one found later ends the process through failed.
	listenAfter <-chan struct{}
	failed      func(error)
}

// Webhook server timeouts. A request is read within webhookReadTimeout (the API server sends a whole
// review at once; a client that trickles one holds a slot for no longer), answered within
// webhookWriteTimeout (above the longest timeoutSeconds, 30 s), and an idle connection is closed only
// after webhookIdleTimeout, longer than kube-apiserver's own idle timeout for webhook connections (90 s,
// client-go's transport default): the client then always closes first, and never sends a request on a
// connection the server is closing (it does not retry a POST).
const (
	webhookReadTimeout  = 10 * time.Second
	webhookWriteTimeout = 35 * time.Second
	webhookIdleTimeout  = 2 * time.Minute
)

// run serves until ctx ends, answering for drain more after that; the channel is closed once it has
// stopped.
//
// kube-apiserver keeps its connections to a webhook open and sends the next admission request on one
// of them: a connection the server closes while idle can meet a request already on its way, and
// kube-apiserver never retries a POST, so under Fail that pod is refused (seen in
// TestPinningWebhookRollingUpgradeRefusesNoPod). While draining, every response therefore says
// "Connection: close" (over HTTP/2, a GOAWAY, which moves requests the server did not take to a new
// connection by itself): each connection is closed by the server right after an answer, never while a
// request may be in flight, and the client's next request opens a new connection, which a Service
// routes to a ready replica.
func (s server) run(ctx context.Context) (<-chan struct{}, error) {
	stopped := make(chan struct{})
	if s.addr == "" {
		close(stopped)
		return stopped, nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", s.name, err)
	}
	if s.listenAfter != nil {
		_ = ln.Close() // the port is free: listen once there is something to serve
	}
	var draining atomic.Bool
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if draining.Load() {
				w.Header().Set("Connection", "close")
			}
			s.handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	if s.tls != nil {
		srv.TLSConfig = s.tls.Clone()
		srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout = webhookReadTimeout, webhookWriteTimeout, webhookIdleTimeout
		if !s.http2 {
			// Off unless asked for (-webhook-http2), as many webhooks since CVE-2023-44487 (HTTP/2
			// rapid reset): a non-nil, empty TLSNextProto keeps net/http from offering h2.
			srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
			srv.TLSConfig.NextProtos = []string{"http/1.1"}
		}
	}
	log := logging.FromContext(ctx)
	go func() {
		defer close(stopped)
		<-ctx.Done()
		draining.Store(true)
		if s.drain > 0 {
			log.Info("still answering while endpoints drop this replica", "server", s.name, "for", s.drain)
			time.Sleep(s.drain)
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if s.listenAfter != nil {
			select {
			case <-s.listenAfter:
			case <-ctx.Done():
				return
			}
			if ln, err = net.Listen("tcp", s.addr); err != nil {
				log.Error("server could not listen", "server", s.name, "err", err)
				if s.failed != nil {
					s.failed(fmt.Errorf("%s server: %w", s.name, err))
				}
				return
			}
		}
		log.Info("serving", "server", s.name, "address", ln.Addr().String())
		// Serve closes ln when it returns, also when Shutdown came first.
		if s.tls != nil {
			err = srv.ServeTLS(ln, "", "") // the certificate comes from the TLS config
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server stopped", "server", s.name, "err", err)
		}
	}()
	return stopped, nil
}

// limitInFlight lets at most n requests be handled at once; the others wait for a slot (holding only
// their connection: the body is read once a slot is taken) until their client gives up. A few dozen
// large reviews at once cannot then take the process past its memory limit.
func limitInFlight(h http.Handler, n int) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		case <-r.Context().Done():
			http.Error(w, "too many requests in flight", http.StatusServiceUnavailable)
		}
	})
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
