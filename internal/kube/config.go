// Package kube builds API clients from flags and the original tool's IS_IN_CLUSTER convention, and
// turns API errors into messages that say what to do.
package kube

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ClientOptions selects the cluster to talk to.
type ClientOptions struct {
	Kubeconfig string
	Context    string
	// InCluster is IS_IN_CLUSTER: nil when unset.
	InCluster *bool
	QPS       float64
	Burst     int
	UserAgent string
	// RequestTimeout bounds each request but watches; zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// AddFlags registers -kubeconfig and -context.
func (o *ClientOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "path to a kubeconfig (implies IS_IN_CLUSTER=false); default: $KUBECONFIG, then ~/.kube/config")
	fs.StringVar(&o.Context, "context", o.Context, "kubeconfig context to use (implies IS_IN_CLUSTER=false)")
}

// AddRateFlags registers -kube-api-qps and -kube-api-burst, the client-side rate limit, with the
// options' values as defaults.
func (o *ClientOptions) AddRateFlags(fs *flag.FlagSet) {
	fs.Float64Var(&o.QPS, "kube-api-qps", o.QPS, "client-side rate limit for API requests")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "client-side burst for API requests")
}

// LoadEnv reads IS_IN_CLUSTER through lookup (os.LookupEnv in production).
func (o *ClientOptions) LoadEnv(lookup func(string) (string, bool)) error {
	v, ok := lookup("IS_IN_CLUSTER")
	if !ok || v == "" {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("IS_IN_CLUSTER=%q is not a boolean (true or false)", v)
	}
	o.InCluster = &b
	return nil
}

// RESTConfig follows the original tool: in-cluster by default, a kubeconfig when IS_IN_CLUSTER=false.
// Explicit -kubeconfig/-context win over the environment; with neither the flags nor IS_IN_CLUSTER set
// and no service account mounted, we fall back to kubeconfig so a laptop user gets kubectl's behaviour.
func (o *ClientOptions) RESTConfig() (*rest.Config, error) {
	useKubeconfig := o.Kubeconfig != "" || o.Context != "" || (o.InCluster != nil && !*o.InCluster)
	var cfg *rest.Config
	var err error
	if !useKubeconfig {
		cfg, err = rest.InClusterConfig()
		if err != nil && o.InCluster == nil {
			useKubeconfig = true
		} else if err != nil {
			return nil, fmt.Errorf("IS_IN_CLUSTER=true but this is not a pod with a service account (%w); set IS_IN_CLUSTER=false to use a kubeconfig", err)
		}
	}
	if useKubeconfig {
		cfg, err = o.kubeconfig().ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig: %w", err)
		}
	}
	if o.QPS > 0 {
		cfg.QPS = float32(o.QPS)
	}
	if o.Burst > 0 {
		cfg.Burst = o.Burst
	}
	if o.UserAgent != "" {
		cfg.UserAgent = o.UserAgent
	}
	timeout := o.RequestTimeout
	if timeout == 0 {
		timeout = DefaultRequestTimeout
	}
	cfg.Wrap(boundRequests(timeout))
	return cfg, nil
}

// DefaultRequestTimeout bounds one API request that is not a watch: a hung connection must not outlive
// a Job's own timeout, nor hold a controller worker forever.
const DefaultRequestTimeout = 30 * time.Second

// boundRequests gives every request but a watch its own deadline. rest.Config.Timeout cannot do this:
// it is an http.Client timeout, so it also ends every watch after that long and informers re-list
// over and over.
func boundRequests(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Query().Get("watch") == "true" {
				return rt.RoundTrip(req)
			}
			ctx, cancel := context.WithTimeout(req.Context(), d)
			resp, err := rt.RoundTrip(req.WithContext(ctx))
			if err != nil {
				cancel()
				return nil, err
			}
			// The deadline also covers reading the body; it ends when the caller closes it.
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

// kubeconfig loads like kubectl: -kubeconfig, else $KUBECONFIG, else ~/.kube/config.
func (o *ClientOptions) kubeconfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
}

// DefaultNamespace is kubectl's: the kubeconfig context's namespace, in a pod its own, else "default".
func (o *ClientOptions) DefaultNamespace() (string, error) {
	ns, _, err := o.kubeconfig().Namespace()
	if err != nil {
		return "", fmt.Errorf("finding the default namespace (give -n NAMESPACE): %w", err)
	}
	if ns == "" {
		ns = "default"
	}
	return ns, nil
}

// Clients bundles the clients every mode uses.
type Clients struct {
	Config   *rest.Config
	Kube     kubernetes.Interface
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// fake: clients over fakes (tests), which have no rate limiter to separate from.
	fake bool
}

// FakeClients are clients over fakes, for tests: Separate returns them as they are.
func FakeClients(k kubernetes.Interface, d dynamic.Interface, m metadata.Interface) *Clients {
	return &Clients{Config: &rest.Config{}, Kube: k, Dynamic: d, Metadata: m, fake: true}
}

// NewClients builds typed, dynamic and metadata clients from one config. The typed client speaks
// protobuf, as kube-controller-manager does: decoding every Pod of a large cluster at start costs a
// fraction of JSON's CPU and garbage. (The dynamic and metadata clients need JSON.)
func NewClients(cfg *rest.Config) (*Clients, error) {
	typed := rest.CopyConfig(cfg)
	typed.ContentType = runtime.ContentTypeProtobuf
	typed.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kc, err := kubernetes.NewForConfig(typed)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Clients{Config: cfg, Kube: kc, Dynamic: dc, Metadata: mc}, nil
}

// WithCompression returns clients of the same API server, identity and rate limiter that accept
// gzipped responses or not: c itself when they already do as asked, or when they are fakes.
func (c *Clients) WithCompression(accept bool) (*Clients, error) {
	if c.fake || c.Config == nil || c.Config.DisableCompression == !accept {
		return c, nil
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.DisableCompression = !accept
	return NewClients(cfg)
}

// Separate returns clients of the same API server and identity with rate limiters of their own: a path
// that must answer in time (the pinning webhook's) does not queue behind the controllers' writes.
func (c *Clients) Separate() (*Clients, error) {
	if c.fake {
		return c, nil
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.RateLimiter = nil // made from QPS and Burst, its own
	return NewClients(cfg)
}
