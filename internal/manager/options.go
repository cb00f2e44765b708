// Package manager runs the controller process: it checks the API server, discovers what is installed,
// builds and starts the shared caches, serves metrics and probes, and runs the controllers, under
// leader election when enabled. The controllers themselves (internal/controller, ...) know nothing of
// this wiring.
package manager

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
)

// Options configure the controller process.
type Options struct {
	// Namespaces to watch; nil means all. namespacesSet tells an empty -namespaces= from an absent one.
	Namespaces    []string
	namespacesSet bool
	// ReplicaSetSelector narrows the ReplicaSets attached, for large clusters. It never narrows
	// in-use protection.
	ReplicaSetSelector string
	// AttachAllNamespaces are where an administrator allows the attach-all annotation ("*": all).
	AttachAllNamespaces []string
	// Secrets follows Secrets as well as ConfigMaps. Off, the controller needs no access to Secrets.
	Secrets bool
	Workers int
	// HeldResync is how often every deletion in-use protection holds is examined again, whatever
	// events came (0: never): the backstop against a missed event holding a deletion forever.
	HeldResync  time.Duration
	MetricsAddr string
	ProbeAddr   string
	// Profiling serves Go's runtime profiles (net/http/pprof) at /debug/pprof/ on the metrics address.
	Profiling bool
	// MemoryLimitRatio is the share of the container's memory limit (its cgroup's) given to the Go
	// runtime as its soft limit, unless GOMEMLIMIT is set; 0: none (memlimit.go).
	MemoryLimitRatio float64
	LeaderElect      bool
	LeaderElection   LeaderElectionOptions
	Client           kube.ClientOptions
	Pinning          PinningOptions
	Trigger          TriggerOptions
}

// TriggerOptions: a config change starts a revision (docs/config-starts.md), with or without pinning.
type TriggerOptions struct {
	// ReloaderAnnotations turns the trigger on: Reloader's annotations on workloads are honoured.
	ReloaderAnnotations bool
	// Settle is how long content must stay unchanged before a revision is started for it.
	Settle time.Duration
}

// TriggerEnabled reports whether the config trigger runs: -reloader-annotations, pinning or not.
func (o *Options) TriggerEnabled() bool { return o.Trigger.ReloaderAnnotations }

// PinningOptions turn on zero-touch pinning and say how the API server reaches its webhook.
type PinningOptions struct {
	Enabled bool
	// URL: serve the webhook at this https URL and register it there (local runs and tests).
	URL string
	// Service is NAMESPACE/NAME of the Service in front of the webhook (in a cluster; the chart).
	Service       string
	BindAddress   string
	Configuration string
	FailurePolicy string
	// CertSecret holds the serving certificate, in the leader election namespace.
	CertSecret string
}

// LeaderElectionOptions tune the Lease; defaults match kube-controller-manager's.
type LeaderElectionOptions struct {
	Namespace     string
	Name          string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// NewOptions returns defaults; lookup reads POD_NAMESPACE (set by the chart through the downward API).
func NewOptions(lookup func(string) (string, bool)) *Options {
	ns, _ := lookup("POD_NAMESPACE")
	if ns == "" {
		ns = "kube-system"
	}
	return &Options{
		Secrets:          true,
		Workers:          8,
		HeldResync:       5 * time.Minute,
		MemoryLimitRatio: 0.9,
		MetricsAddr:      ":8080",
		ProbeAddr:        ":8081",
		LeaderElect:      true,
		LeaderElection: LeaderElectionOptions{
			Namespace: ns, Name: "configmap-attacher",
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		},
		// Each attach is one PATCH; client-go's default 5 QPS would queue a 500-Rollout deploy for minutes.
		Client:  kube.ClientOptions{QPS: 100, Burst: 200},
		Pinning: PinningOptions{BindAddress: ":9443", Configuration: "configmap-attacher", FailurePolicy: "Fail"},
		Trigger: TriggerOptions{Settle: trigger.DefaultSettle},
	}
}

// AddFlags registers the controller's flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.Func("namespaces", "comma-separated namespaces to watch (default: all)", func(v string) error {
		o.Namespaces, o.namespacesSet = nil, true
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.Namespaces = append(o.Namespaces, n)
			}
		}
		return nil
	})
	fs.StringVar(&o.ReplicaSetSelector, "replicaset-selector", o.ReplicaSetSelector, "label selector limiting the ReplicaSets attached, e.g. team=payments (default: all); in-use protection is never narrowed")
	fs.Func("attach-all-namespaces", "comma-separated namespaces where the "+api.AttachAllAnnotation+" annotation is honoured, or * for all (default: none; see docs/controller.md for the risk)", func(v string) error {
		o.AttachAllNamespaces = nil
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.AttachAllNamespaces = append(o.AttachAllNamespaces, n)
			}
		}
		return nil
	})
	fs.BoolVar(&o.Secrets, "secrets", o.Secrets, "follow opted-in Secrets too (needs get/list/watch/patch on secrets); -secrets=false follows ConfigMaps only")
	fs.IntVar(&o.Workers, "workers", o.Workers, "revisions synced in parallel")
	fs.DurationVar(&o.HeldResync, "held-resync", o.HeldResync, "how often every deletion held by in-use protection is examined again, as a backstop for a missed event (0 disables)")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "address serving /metrics (empty disables)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "address serving /healthz and /readyz (empty disables)")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "serve Go's runtime profiles at /debug/pprof/ on the metrics address (heap, CPU, goroutines; for diagnosis, off by default)")
	fs.Float64Var(&o.MemoryLimitRatio, "memory-limit-ratio", o.MemoryLimitRatio, "the Go runtime's soft memory limit as this share of the container's memory limit (its cgroup's), unless GOMEMLIMIT is set: "+
		"the heap is collected before the container reaches its limit (0 disables)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader through a Lease so several replicas are safe")
	fs.StringVar(&o.LeaderElection.Namespace, "leader-election-namespace", o.LeaderElection.Namespace, "namespace of the Lease (default: $POD_NAMESPACE, else kube-system)")
	fs.StringVar(&o.LeaderElection.Name, "leader-election-id", o.LeaderElection.Name, "name of the Lease")
	fs.DurationVar(&o.LeaderElection.LeaseDuration, "leader-election-lease-duration", o.LeaderElection.LeaseDuration, "how long a standby waits before taking over an unrenewed Lease")
	fs.DurationVar(&o.LeaderElection.RenewDeadline, "leader-election-renew-deadline", o.LeaderElection.RenewDeadline, "how long the leader retries renewing before giving up")
	fs.DurationVar(&o.LeaderElection.RetryPeriod, "leader-election-retry-period", o.LeaderElection.RetryPeriod, "how often candidates retry")
	fs.BoolVar(&o.Pinning.Enabled, "pinning", o.Pinning.Enabled, "zero-touch pinning: serve the pod webhook and snapshot pinned config per revision (docs/pinning.md)")
	fs.StringVar(&o.Pinning.URL, "webhook-url", o.Pinning.URL, "serve the pinning webhook at this URL (https://127.0.0.1:PORT) and register it there; local runs and tests")
	fs.StringVar(&o.Pinning.Service, "webhook-service", o.Pinning.Service, "NAMESPACE/NAME of the Service in front of the pinning webhook (in a cluster)")
	fs.StringVar(&o.Pinning.BindAddress, "webhook-bind-address", o.Pinning.BindAddress, "address the pinning webhook listens on (with -webhook-service)")
	fs.StringVar(&o.Pinning.Configuration, "webhook-configuration-name", o.Pinning.Configuration, "name of the MutatingWebhookConfiguration")
	fs.StringVar(&o.Pinning.FailurePolicy, "webhook-failure-policy", o.Pinning.FailurePolicy, "Fail or Ignore, with -webhook-url (docs/pinning.md: the trade-off)")
	fs.StringVar(&o.Pinning.CertSecret, "webhook-cert-secret", o.Pinning.CertSecret, "Secret (in the leader election namespace) holding the webhook's serving certificate (default: <webhook-configuration-name>-webhook-tls)")
	fs.BoolVar(&o.Trigger.ReloaderAnnotations, "reloader-annotations", o.Trigger.ReloaderAnnotations, "honour Reloader's annotations on workloads, with or without -pinning: a change of the config they select starts a new revision "+
		"by writing one annotation on the pod template (docs/config-starts.md); off while the cluster still runs Reloader")
	fs.DurationVar(&o.Trigger.Settle, "config-settle", o.Trigger.Settle, "how long a config object must stay unchanged before a revision is started for its change: a burst of edits within it starts one")
	fs.Float64Var(&o.Client.QPS, "kube-api-qps", o.Client.QPS, "client-side rate limit for API requests")
	fs.IntVar(&o.Client.Burst, "kube-api-burst", o.Client.Burst, "client-side burst for API requests")
	o.Client.AddFlags(fs)
}

// Validate checks the options before anything starts.
func (o *Options) Validate() error {
	var errs []string
	if o.namespacesSet && len(o.Namespaces) == 0 {
		errs = append(errs, "-namespaces is empty: name at least one namespace, or leave the flag out to watch all namespaces")
	}
	for _, n := range o.Namespaces {
		for _, msg := range validation.IsDNS1123Label(n) {
			errs = append(errs, fmt.Sprintf("-namespaces: %q is not a valid namespace: %s", n, msg))
		}
	}
	for _, n := range o.AttachAllNamespaces {
		if n == "*" {
			continue
		}
		for _, msg := range validation.IsDNS1123Label(n) {
			errs = append(errs, fmt.Sprintf("-attach-all-namespaces: %q is not a valid namespace: %s", n, msg))
		}
	}
	if _, err := labels.Parse(o.ReplicaSetSelector); err != nil {
		errs = append(errs, fmt.Sprintf("-replicaset-selector: %v", err))
	}
	if o.Trigger.Settle < 0 {
		errs = append(errs, "-config-settle must not be negative")
	}
	if o.Profiling && o.MetricsAddr == "" {
		errs = append(errs, "-profiling serves on the metrics address: set -metrics-bind-address")
	}
	if o.Workers < 1 {
		errs = append(errs, "-workers must be at least 1")
	}
	if o.MemoryLimitRatio < 0 || o.MemoryLimitRatio > 1 {
		errs = append(errs, fmt.Sprintf("-memory-limit-ratio %g is not a share: give a number from 0 (no soft limit) to 1, e.g. 0.9", o.MemoryLimitRatio))
	}
	if o.HeldResync < 0 {
		errs = append(errs, fmt.Sprintf("-held-resync %s is negative: give a period such as 5m, or 0 to disable the resync", o.HeldResync))
	}
	errs = append(errs, o.Pinning.validate()...)
	if o.LeaderElect {
		le := o.LeaderElection
		if le.Name == "" || le.Namespace == "" {
			errs = append(errs, "-leader-election-id and -leader-election-namespace must not be empty")
		}
		if le.RetryPeriod <= 0 || le.RenewDeadline <= le.RetryPeriod || le.LeaseDuration <= le.RenewDeadline {
			errs = append(errs, "leader election needs lease-duration > renew-deadline > retry-period > 0")
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func (p *PinningOptions) validate() []string {
	var errs []string
	switch {
	case !p.Enabled && (p.URL != "" || p.Service != ""):
		errs = append(errs, "-webhook-url and -webhook-service serve the pinning webhook: add -pinning")
	case !p.Enabled:
		return nil
	case p.URL == "" && p.Service == "":
		errs = append(errs, "-pinning needs -webhook-url=https://127.0.0.1:PORT (local) or -webhook-service=NAMESPACE/NAME (in a cluster)")
	case p.URL != "" && p.Service != "":
		errs = append(errs, "-webhook-url and -webhook-service are exclusive")
	}
	if p.URL != "" {
		if _, _, err := p.urlHostPort(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if p.Service != "" {
		if ns, name, ok := strings.Cut(p.Service, "/"); !ok || ns == "" || name == "" {
			errs = append(errs, fmt.Sprintf("-webhook-service %q must be NAMESPACE/NAME", p.Service))
		}
	}
	if p.FailurePolicy != "Fail" && p.FailurePolicy != "Ignore" {
		errs = append(errs, fmt.Sprintf("-webhook-failure-policy %q: use Fail or Ignore", p.FailurePolicy))
	}
	return errs
}

// urlHostPort splits -webhook-url, which must be https://HOST:PORT with no path.
func (p *PinningOptions) urlHostPort() (string, string, error) {
	u, err := url.Parse(p.URL)
	if err != nil || u.Scheme != "https" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return "", "", fmt.Errorf("-webhook-url %q must be https://HOST:PORT, e.g. https://127.0.0.1:9443", p.URL)
	}
	return u.Hostname(), u.Port(), nil
}
