// Package oneshot is the Job mode, the `attach` command: it waits until a workload's current
// ReplicaSet references the ConfigMaps and Secrets named on the command line, then runs the one attach
// step (attach.Writer.Attach) once, as the original configmap-attacher Job did, but waiting for the
// right ReplicaSet and merging instead of replacing.
package oneshot

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// DefaultTimeout is how long we wait for the workload's controller to create the ReplicaSet that uses
// the named config: long enough for a slow Rollouts controller, short enough to fail a deploy visibly.
const DefaultTimeout = 3 * time.Minute

// Options are the Job mode's flags. The original tool's single-dash flags (-rollout, -namespace,
// -configmaps) keep their meaning; the Go flag package also accepts the --flag forms.
type Options struct {
	Rollout    string
	Deployment string
	Namespace  string
	ConfigMaps nameList
	Secrets    nameList
	Timeout    time.Duration
	DryRun     bool
	Client     kube.ClientOptions
}

// NewOptions returns options with defaults.
func NewOptions() *Options {
	return &Options{Timeout: DefaultTimeout}
}

// AddFlags registers the Job mode's flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Rollout, "rollout", o.Rollout, "Argo Rollout whose current ReplicaSet will own the config (exclusive with -deployment)")
	fs.StringVar(&o.Deployment, "deployment", o.Deployment, "Deployment whose current ReplicaSet will own the config (exclusive with -rollout)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the workload and of the config objects")
	fs.Var(&o.ConfigMaps, "configmaps", "comma-separated ConfigMap names to attach, e.g. demo-cm-2648648036,demo-env-1a2b")
	fs.Var(&o.Secrets, "secrets", "comma-separated Secret names to attach")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "how long to wait for the current ReplicaSet to reference every named object (Go duration, e.g. 90s)")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "print the planned changes and validate them with a server-side dry run; write nothing")
	o.Client.AddFlags(fs)
}

// Validate checks the flags alone, before any API call.
func (o *Options) Validate() error {
	var errs []string
	switch {
	case o.Rollout == "" && o.Deployment == "":
		errs = append(errs, "one of -rollout or -deployment is required")
	case o.Rollout != "" && o.Deployment != "":
		errs = append(errs, "-rollout and -deployment are exclusive: pass only one")
	}
	for _, f := range []struct{ flag, value string }{{"rollout", o.Rollout}, {"deployment", o.Deployment}} {
		if f.value == "" {
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(f.value) {
			errs = append(errs, fmt.Sprintf("-%s %q is not a valid name: %s", f.flag, f.value, msg))
		}
	}
	if o.Namespace == "" {
		errs = append(errs, "-namespace is required")
	} else {
		for _, msg := range validation.IsDNS1123Label(o.Namespace) {
			errs = append(errs, fmt.Sprintf("-namespace %q is not a valid namespace: %s", o.Namespace, msg))
		}
	}
	if !o.ConfigMaps.set && !o.Secrets.set {
		errs = append(errs, "nothing to attach: pass -configmaps and/or -secrets")
	}
	errs = append(errs, o.ConfigMaps.problems("configmaps")...)
	errs = append(errs, o.Secrets.problems("secrets")...)
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Sprintf("-timeout %s must be positive", o.Timeout))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Workload returns the workload named by the flags.
func (o *Options) Workload() workload.Ref {
	if o.Deployment != "" {
		return workload.Ref{Kind: workload.Deployment, Namespace: o.Namespace, Name: o.Deployment}
	}
	return workload.Ref{Kind: workload.Rollout, Namespace: o.Namespace, Name: o.Rollout}
}

// Targets returns the named config objects, ConfigMaps first, in the order given.
func (o *Options) Targets() []refs.Ref {
	var out []refs.Ref
	for _, n := range o.ConfigMaps.names {
		out = append(out, refs.Ref{Kind: refs.ConfigMap, Name: n})
	}
	for _, n := range o.Secrets.names {
		out = append(out, refs.Ref{Kind: refs.Secret, Name: n})
	}
	return out
}

// nameList is a comma-separated flag value; it remembers whether it was given at all so that
// "-configmaps ”" is reported as empty rather than as missing.
type nameList struct {
	set   bool
	raw   string
	names []string
}

func (l *nameList) String() string { return l.raw }

func (l *nameList) Set(v string) error {
	if l.set {
		return fmt.Errorf("given twice: pass one comma-separated list")
	}
	l.set, l.raw = true, v
	if strings.TrimSpace(v) != "" {
		for _, n := range strings.Split(v, ",") {
			l.names = append(l.names, strings.TrimSpace(n))
		}
	}
	return nil
}

func (l *nameList) problems(flagName string) []string {
	if !l.set {
		return nil
	}
	if len(l.names) == 0 {
		return []string{fmt.Sprintf("-%s is empty: give at least one name", flagName)}
	}
	var errs []string
	seen := map[string]bool{}
	for i, n := range l.names {
		switch {
		case n == "":
			errs = append(errs, fmt.Sprintf("-%s %q has an empty name at position %d (stray comma?)", flagName, l.raw, i+1))
		case seen[n]:
			errs = append(errs, fmt.Sprintf("-%s lists %q twice", flagName, n))
		default:
			for _, msg := range validation.IsDNS1123Subdomain(n) {
				errs = append(errs, fmt.Sprintf("-%s: %q is not a valid Kubernetes name: %s", flagName, n, msg))
			}
		}
		seen[n] = true
	}
	return errs
}
