// Package manager runs the controller process: it checks the API server, discovers what is installed,
// builds and starts the shared caches, serves metrics and probes, and runs the controllers, under
// leader election when enabled. The controllers themselves (internal/controller, ...) know nothing of
// this wiring.
package manager

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/internal/webhookcert"
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
	// StartGCPercent is the Go GC's target (GOGC) until the start's work is done (the caches synced,
	// and a leader's first pass queued and its sweep listed), GCPercent its target after that, unless
	// GOGC is set; 0: Go's default, 100 (gcPercents in memlimit.go).
	StartGCPercent int
	GCPercent      int
	LeaderElect    bool
	LeaderElection LeaderElectionOptions
	Client         kube.ClientOptions
	Pinning        PinningOptions
	Trigger        TriggerOptions
}

// TriggerOptions: a config change starts a revision (docs/config-starts.md), with or without pinning.
type TriggerOptions struct {
	// ReloaderAnnotations turns the trigger on: Reloader's annotations on workloads are honoured.
	ReloaderAnnotations bool
	// Settle is how long content must stay unchanged before a revision is started for it.
	Settle time.Duration
	// MaxWait bounds the settle window's hold on a change that keeps changing, and the wait for a
	// pinned snapshot (0: trigger.MaxWaitFactor times Settle).
	MaxWait time.Duration
	// KeySecret names the Secret, in the leader election namespace, holding the key of the hash the
	// trigger keeps of Secret contents (created by the controller if missing).
	KeySecret string
}

// TriggerEnabled reports whether the config trigger runs: -reloader-annotations, pinning or not.
func (o *Options) TriggerEnabled() bool { return o.Trigger.ReloaderAnnotations }

// PinningOptions turn on zero-touch pinning and say how the API server reaches its webhook.
type PinningOptions struct {
	Enabled bool
	// URL: serve the webhook at this https URL and register it there (local runs and tests).
	URL string
	// Service is NAMESPACE/NAME of the Service in front of the webhook (in a cluster; the chart).
	Service string
	// BindAddress is where the webhook listens; with URL, its host and port unless set explicitly
	// (bindAddressSet): replicas on one machine then serve one URL, as pods serve one Service.
	BindAddress    string
	bindAddressSet bool
	Configuration  string
	FailurePolicy  string
	TimeoutSeconds int
	// CertSecret holds the CA and serving certificate, in the leader election namespace.
	CertSecret string
	// CertValidity is each serving certificate's lifetime; it is replaced when two thirds have passed,
	// under a CA that lives ten of them.
	CertValidity time.Duration
	// ShutdownDelay is how long the webhook keeps answering after the process is told to stop, while
	// its readiness already fails: a Service's endpoints take seconds to drop a terminating pod, and
	// kube-apiserver does not retry a webhook call it could not connect for. Negative: the default for
	// the mode (5 s behind a Service, 0 at a URL).
	ShutdownDelay time.Duration
	// HTTP2 offers HTTP/2 besides HTTP/1.1 (off by default: CVE-2023-44487).
	HTTP2 bool
	// MaxInFlight is how many admission requests are handled at once; more wait for a slot.
	MaxInFlight int
	// Admission says who pins pods: the API server (policy) or the webhook (admission.go).
	Admission AdmissionOptions
}

// DefaultCertValidity is a serving certificate's lifetime by default: a year.
const DefaultCertValidity = 365 * 24 * time.Hour

// defaultServiceShutdownDelay leaves the endpoints controller and kube-proxy time to drop a
// terminating replica before it stops answering.
const defaultServiceShutdownDelay = 5 * time.Second

// shutdownDelay is ShutdownDelay with the mode's default.
func (p *PinningOptions) shutdownDelay() time.Duration {
	switch {
	case p.ShutdownDelay >= 0:
		return p.ShutdownDelay
	case p.URL != "":
		return 0
	}
	return defaultServiceShutdownDelay
}

// listenAddress is where the webhook listens: BindAddress, or with URL and no explicit BindAddress
// the URL's own host and port.
func (p *PinningOptions) listenAddress() string {
	if p.URL != "" && !p.bindAddressSet {
		host, port, _ := p.urlHostPort()
		return net.JoinHostPort(host, port)
	}
	return p.BindAddress
}

// hosts are the names the API server dials, which the serving certificate must name.
func (p *PinningOptions) hosts() []string {
	if p.URL != "" {
		host, _, _ := p.urlHostPort()
		return []string{host}
	}
	ns, name, _ := strings.Cut(p.Service, "/")
	return []string{name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local", name + "." + ns, name}
}

// certSecret is CertSecret, or its default.
func (p *PinningOptions) certSecret() string {
	if p.CertSecret != "" {
		return p.CertSecret
	}
	return p.Configuration + "-webhook-tls"
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
		MemoryLimitRatio: 0.8,
		StartGCPercent:   50,
		GCPercent:        50,
		MetricsAddr:      ":8080",
		ProbeAddr:        ":8081",
		LeaderElect:      true,
		LeaderElection: LeaderElectionOptions{
			Namespace: ns, Name: "configmap-attacher",
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		},
		// Each attach is one PATCH; client-go's default 5 QPS would queue a 500-Rollout deploy for minutes.
		Client: kube.ClientOptions{QPS: 100, Burst: 200},
		Pinning: PinningOptions{BindAddress: ":9443", Configuration: "configmap-attacher", FailurePolicy: "Fail",
			TimeoutSeconds: pinning.DefaultTimeoutSeconds, CertValidity: DefaultCertValidity, ShutdownDelay: -1, MaxInFlight: 32,
			Admission: defaultAdmissionOptions()},
		Trigger: TriggerOptions{Settle: trigger.DefaultSettle, KeySecret: trigger.DefaultKeySecret.Name},
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
	fs.IntVar(&o.StartGCPercent, "start-gc-percent", o.StartGCPercent, "the Go GC's target (as GOGC) while the caches fill at start, unless GOGC is set: "+
		"a start marks far more than the caches keep, and Go's default target (100) doubles it into the process's peak; -gc-percent's once the caches synced and, on the leader, its first pass is queued (0: -gc-percent's throughout)")
	fs.IntVar(&o.GCPercent, "gc-percent", o.GCPercent, "the Go GC's target (as GOGC) once the start is done, unless GOGC is set: "+
		"the heap grows to live × (1 + this/100) between collections, the process's peak where no container memory limit gives a soft one (0: Go's default, 100)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader through a Lease so several replicas are safe")
	fs.StringVar(&o.LeaderElection.Namespace, "leader-election-namespace", o.LeaderElection.Namespace, "namespace of the Lease (default: $POD_NAMESPACE, else kube-system)")
	fs.StringVar(&o.LeaderElection.Name, "leader-election-id", o.LeaderElection.Name, "name of the Lease")
	fs.DurationVar(&o.LeaderElection.LeaseDuration, "leader-election-lease-duration", o.LeaderElection.LeaseDuration, "how long a standby waits before taking over an unrenewed Lease")
	fs.DurationVar(&o.LeaderElection.RenewDeadline, "leader-election-renew-deadline", o.LeaderElection.RenewDeadline, "how long the leader retries renewing before giving up")
	fs.DurationVar(&o.LeaderElection.RetryPeriod, "leader-election-retry-period", o.LeaderElection.RetryPeriod, "how often candidates retry")
	fs.BoolVar(&o.Pinning.Enabled, "pinning", o.Pinning.Enabled, "zero-touch pinning: serve the pod webhook and snapshot pinned config per revision (docs/pinning.md)")
	fs.StringVar(&o.Pinning.URL, "webhook-url", o.Pinning.URL, "serve the pinning webhook at this URL (https://127.0.0.1:PORT) and register it there; local runs and tests")
	fs.StringVar(&o.Pinning.Service, "webhook-service", o.Pinning.Service, "NAMESPACE/NAME of the Service in front of the pinning webhook (in a cluster)")
	fs.Func("webhook-bind-address", "address the pinning webhook listens on (default :9443; with -webhook-url, the URL's host and port unless set: "+
		"several replicas on one machine then serve one URL)", func(v string) error {
		o.Pinning.BindAddress, o.Pinning.bindAddressSet = v, true
		return nil
	})
	fs.StringVar(&o.Pinning.Configuration, "webhook-configuration-name", o.Pinning.Configuration, "name of the MutatingWebhookConfiguration")
	fs.StringVar(&o.Pinning.FailurePolicy, "webhook-failure-policy", o.Pinning.FailurePolicy, "Fail or Ignore, with -webhook-url, where the controller writes the whole configuration "+
		"(behind the chart's Service the chart's pinning.failurePolicy decides; docs/pinning.md: the trade-off)")
	fs.IntVar(&o.Pinning.TimeoutSeconds, "webhook-timeout-seconds", o.Pinning.TimeoutSeconds, "how long kube-apiserver waits for the webhook (1-30), with -webhook-url (behind the chart's Service: pinning.timeoutSeconds)")
	fs.StringVar(&o.Pinning.CertSecret, "webhook-cert-secret", o.Pinning.CertSecret, "Secret (in the leader election namespace) holding the webhook's CA and serving certificate (default: <webhook-configuration-name>-webhook-tls)")
	fs.DurationVar(&o.Pinning.CertValidity, "webhook-cert-validity", o.Pinning.CertValidity, "the lifetime of each serving certificate of the webhook (at least 30s); "+
		"it is replaced when two thirds have passed, under a CA that lives ten times as long")
	fs.DurationVar(&o.Pinning.ShutdownDelay, "webhook-shutdown-delay", o.Pinning.ShutdownDelay, "how long the webhook keeps answering after a stop signal, not ready meanwhile, "+
		"while the Service's endpoints drop this replica (default: 5s with -webhook-service, 0 with -webhook-url)")
	fs.BoolVar(&o.Pinning.HTTP2, "webhook-http2", o.Pinning.HTTP2, "offer HTTP/2 on the pinning webhook besides HTTP/1.1 (off by default, as many webhooks since CVE-2023-44487, HTTP/2 rapid reset)")
	fs.IntVar(&o.Pinning.MaxInFlight, "webhook-max-in-flight", o.Pinning.MaxInFlight, "admission requests the pinning webhook handles at once; more wait for a slot "+
		"(each may hold a review of up to 4 MiB: this bounds the webhook's memory)")
	o.Pinning.Admission.addFlags(fs)
	fs.BoolVar(&o.Trigger.ReloaderAnnotations, "reloader-annotations", o.Trigger.ReloaderAnnotations, "honour Reloader's annotations on workloads, with or without -pinning: a change of the config they select starts a new revision "+
		"by writing one annotation on the pod template (docs/config-starts.md); off while the cluster still runs Reloader")
	fs.DurationVar(&o.Trigger.Settle, "config-settle", o.Trigger.Settle, "how long a config object must stay unchanged before a revision is started for its change: a burst of edits within it starts one")
	fs.DurationVar(&o.Trigger.MaxWait, "config-max-wait", o.Trigger.MaxWait, fmt.Sprintf("the longest a change waits for its content to settle (an object rewritten more often than -config-settle) "+
		"or for a pinned snapshot: then its revision starts with the content of that moment, and a Warning says what kept it waiting (default: %d times -config-settle; with -config-settle=0, %s)",
		trigger.MaxWaitFactor, trigger.MaxWaitFactor*trigger.DefaultSettle))
	fs.StringVar(&o.Trigger.KeySecret, "config-hash-key-secret", o.Trigger.KeySecret, "Secret (in the leader election namespace) holding the key of the hash the config trigger keeps of Secret contents "+
		"in its records and in config-hash; the controller creates it if missing")
	o.Client.AddRateFlags(fs)
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
	if o.Trigger.MaxWait != 0 && o.Trigger.MaxWait < o.Trigger.Settle {
		errs = append(errs, fmt.Sprintf("-config-max-wait %s is shorter than -config-settle %s: give at least the settle window (or leave it out: %d times it)",
			o.Trigger.MaxWait, o.Trigger.Settle, trigger.MaxWaitFactor))
	}
	if o.TriggerEnabled() && o.Secrets && len(validation.IsDNS1123Subdomain(o.Trigger.KeySecret)) > 0 {
		errs = append(errs, fmt.Sprintf("-config-hash-key-secret %q is not a valid Secret name: give e.g. configmap-attacher-config-hash-key", o.Trigger.KeySecret))
	}
	if o.Profiling && o.MetricsAddr == "" {
		errs = append(errs, "-profiling serves on the metrics address: set -metrics-bind-address")
	}
	if o.Workers < 1 {
		errs = append(errs, "-workers must be at least 1")
	}
	if o.MemoryLimitRatio < 0 || o.MemoryLimitRatio > 1 {
		errs = append(errs, fmt.Sprintf("-memory-limit-ratio %g is not a share: give a number from 0 (no soft limit) to 1, e.g. 0.8", o.MemoryLimitRatio))
	}
	if o.StartGCPercent < 0 {
		errs = append(errs, fmt.Sprintf("-start-gc-percent %d is negative: give a GC target such as 50, or 0 to keep -gc-percent's throughout", o.StartGCPercent))
	}
	if o.GCPercent < 0 {
		errs = append(errs, fmt.Sprintf("-gc-percent %d is negative: give a GC target such as 50, or 0 for Go's default (100)", o.GCPercent))
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
	case p.URL == "" && p.Service == "" && p.Admission.needsWebhookAddress():
		errs = append(errs, "-pinning needs -webhook-url=https://127.0.0.1:PORT (local) or -webhook-service=NAMESPACE/NAME (in a cluster)")
	case p.URL != "" && p.Service != "":
		errs = append(errs, "-webhook-url and -webhook-service are exclusive")
	}
	errs = append(errs, p.Admission.validate()...)
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
	if p.TimeoutSeconds < 1 || p.TimeoutSeconds > 30 {
		errs = append(errs, fmt.Sprintf("-webhook-timeout-seconds %d: kube-apiserver accepts 1 to 30", p.TimeoutSeconds))
	}
	if p.CertValidity < webhookcert.MinValidity {
		errs = append(errs, fmt.Sprintf("-webhook-cert-validity %s is too short: give at least %s (one year by default)", p.CertValidity, webhookcert.MinValidity))
	}
	if p.CertValidity > webhookcert.MaxValidity {
		errs = append(errs, fmt.Sprintf("-webhook-cert-validity %s is too long: give at most %s, five years (one year by default)", p.CertValidity, webhookcert.MaxValidity))
	}
	if p.MaxInFlight < 1 {
		errs = append(errs, fmt.Sprintf("-webhook-max-in-flight %d: give at least 1 (32 by default)", p.MaxInFlight))
	}
	if p.bindAddressSet {
		if _, _, err := net.SplitHostPort(p.BindAddress); err != nil {
			errs = append(errs, fmt.Sprintf("-webhook-bind-address %q must be HOST:PORT or :PORT, e.g. :9443", p.BindAddress))
		}
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
