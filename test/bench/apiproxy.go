package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// apiProxy stands between one process and the API server and counts the process's requests by verb
// and resource. kube-apiserver's own apiserver_request_total has no label saying who asked, so it
// cannot tell one writer's requests from the workload controllers' caused by the same change; a
// proxy in front of one process counts exactly that process's. The process gets a kubeconfig pointing
// at the proxy (plain HTTP on loopback); the proxy forwards with the cluster's admin credentials.
// Watches stream through it unbuffered.
type apiProxy struct {
	// Kubeconfig is the kubeconfig file to give the process.
	Kubeconfig string

	srv *http.Server
	dir string

	mu     sync.Mutex
	counts map[string]float64 // "VERB resource[/subresource]"
}

func startAPIProxy(kubeconfig string) (*apiProxy, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-apiproxy")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &apiProxy{dir: dir, counts: map[string]float64{}, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	forward := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, Transport: rt, FlushInterval: -1}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.counts[requestKind(r)]++
		p.mu.Unlock()
		forward.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(l) }()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: "http://" + l.Addr().String()}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	if err := clientcmd.WriteToFile(*kc, p.Kubeconfig); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// Counts returns the requests counted so far, by "VERB resource[/subresource]".
func (p *apiProxy) Counts() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]float64, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// Stop closes the proxy (and the connections through it).
func (p *apiProxy) Stop() {
	_ = p.srv.Shutdown(context.Background())
	_ = p.srv.Close()
	os.RemoveAll(p.dir)
}

// requestKind is "VERB resource[/subresource]" for a Kubernetes API request, with kube-apiserver's verbs:
// LIST, WATCH and GET for reads, APPLY for a server-side apply, the HTTP method for other writes;
// "GET discovery" for paths outside a resource.
func requestKind(r *http.Request) string {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(seg) > 2 && seg[0] == "api":
		rest = seg[2:]
	case len(seg) > 3 && seg[0] == "apis":
		rest = seg[3:]
	default:
		return r.Method + " discovery"
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	resource, named := rest[0], len(rest) > 1
	if len(rest) > 2 {
		resource += "/" + rest[2]
	}
	verb := r.Method
	if verb == http.MethodPatch && strings.HasPrefix(r.Header.Get("Content-Type"), "application/apply-patch") {
		verb = "APPLY" // server-side apply, as kube-apiserver's metrics call it
	}
	if verb == http.MethodGet {
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "WATCH"
		case !named:
			verb = "LIST"
		}
	}
	return verb + " " + resource
}

// isWrite tells a write (POST, PUT, PATCH, APPLY, DELETE of a resource) from a read.
func isWrite(kind string) bool {
	verb, _, _ := strings.Cut(kind, " ")
	switch verb {
	case http.MethodPost, http.MethodPut, http.MethodPatch, "APPLY", http.MethodDelete:
		return true
	}
	return false
}

// diffCounts is after - before, the kinds that changed, sorted.
func diffCounts(before, after map[string]float64) []countOf {
	var out []countOf
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out = append(out, countOf{k, d})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].kind < out[j].kind })
	return out
}

type countOf struct {
	kind string
	n    float64
}

// perChange sums the writes (or the reads) among counts and says them per change, with the
// breakdown: "2.02 (PATCH deployments 0.50, PATCH rollouts 0.50, POST events 1.02)".
func perChange(counts []countOf, changes int, writes bool) string {
	var total float64
	var parts []string
	for _, c := range counts {
		if isWrite(c.kind) != writes || strings.HasSuffix(c.kind, " discovery") || strings.HasPrefix(c.kind, "WATCH ") {
			continue
		}
		total += c.n
		parts = append(parts, fmt.Sprintf("%s %.2f", c.kind, c.n/float64(changes)))
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%.2f (%s)", total/float64(changes), strings.Join(parts, ", "))
}

// apiserverRequestKinds reads kube-apiserver's apiserver_request_total, summed by "VERB resource[/subresource]"
// over codes and scopes (cluster-wide, every client).
func apiserverRequestKinds(ctx context.Context, kube interface {
	RESTClient() rest.Interface
}) (map[string]float64, error) {
	raw, err := kube.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		kind := between(line, `verb="`, `"`) + " " + between(line, `resource="`, `"`)
		if sub := between(line, `subresource="`, `"`); sub != "" {
			kind += "/" + sub
		}
		var v float64
		if _, err := fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%g", &v); err != nil {
			return nil, err
		}
		out[kind] += v
	}
	if len(out) == 0 {
		return nil, errors.New("no apiserver_request_total in kube-apiserver's /metrics")
	}
	return out, nil
}
