package manager

import (
	"context"
	"flag"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
)

// AdmissionOptions say who pins pods: the API server through admission policies over our tables
// (policy), our webhook (webhook), or whichever the API server allows (auto).
type AdmissionOptions struct {
	// Mode is -pinning-admission: auto, policy or webhook.
	Mode string
	// PolicyName names the admission policies and their bindings; empty: the webhook configuration's
	// name (-webhook-configuration-name), so one name stands for pinning's admission either way.
	PolicyName string
	// ApplyPolicies: the controller writes the policies (as it writes the webhook's configuration at
	// -webhook-url); the chart renders them itself and turns this off.
	ApplyPolicies bool
	// TableMaxBytes bounds a PinTable's spec; beyond, workloads are split off into shards.
	TableMaxBytes int
	// WaitWarning: a revision that wants pods and has had no entry for longer gets a Warning Event on
	// its workload and counts in configmap_attacher_pin_revisions_waiting.
	WaitWarning time.Duration
	// resolved is Mode once the API server was asked (Run).
	resolved policy.Mode
}

func defaultAdmissionOptions() AdmissionOptions {
	return AdmissionOptions{Mode: string(policy.Auto), ApplyPolicies: true, TableMaxBytes: policy.DefaultMaxTableBytes, WaitWarning: policy.DefaultWaitWarning}
}

func (a *AdmissionOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.Mode, "pinning-admission", a.Mode, "who pins pods with -pinning: policy (the API server, through admission policies over tables this controller keeps; "+
		"Kubernetes 1.36+), webhook (this controller's webhook), or auto: policy where the API server serves mutatingadmissionpolicies in admissionregistration.k8s.io/v1, else webhook (docs/pinning.md)")
	fs.StringVar(&a.PolicyName, "admission-policy-name", a.PolicyName, "name of the admission policies and their bindings (policy mode; default: -webhook-configuration-name)")
	fs.BoolVar(&a.ApplyPolicies, "apply-admission-policies", a.ApplyPolicies, "write the admission policies and their bindings in policy mode (the chart renders them itself and sets this to false)")
	fs.IntVar(&a.TableMaxBytes, "pinning-table-max-bytes", a.TableMaxBytes, "the largest PinTable spec written, in bytes; beyond, a namespace's workloads are split off into shards (pins-1, pins-2, ...)")
	fs.DurationVar(&a.WaitWarning, "pinning-wait-warning", a.WaitWarning, "a revision that wants pods and has had no PinTable entry for longer gets a PinEntryWaiting Warning Event on its workload "+
		"and counts in configmap_attacher_pin_revisions_waiting (its pods are refused meanwhile)")
}

func (a *AdmissionOptions) validate() []string {
	var errs []string
	if _, err := policy.ParseMode(a.Mode); err != nil {
		errs = append(errs, err.Error())
	}
	if a.TableMaxBytes < 4096 {
		errs = append(errs, fmt.Sprintf("-pinning-table-max-bytes %d is too small: give at least 4096 (1 MiB by default)", a.TableMaxBytes))
	}
	if a.WaitWarning <= 0 {
		errs = append(errs, fmt.Sprintf("-pinning-wait-warning %s: give a positive duration (%s by default)", a.WaitWarning, policy.DefaultWaitWarning))
	}
	return errs
}

// policyName is PolicyName, or the webhook configuration's name.
func (p *PinningOptions) policyName() string {
	if p.Admission.PolicyName != "" {
		return p.Admission.PolicyName
	}
	return p.Configuration
}

// needsWebhookAddress reports whether the options must say where the webhook is served: not in
// policy mode, and in auto mode only if the API server turns out not to serve the policies (Run says
// so then).
func (a *AdmissionOptions) needsWebhookAddress() bool { return a.Mode == string(policy.Webhook) }

// policyMode reports whether the API server pins pods (Run resolved the mode to policy).
func (o *Options) policyMode() bool {
	return o.Pinning.Enabled && o.Pinning.Admission.resolved == policy.Policy
}

// admission is pinning's admission side, besides the webhook: the mode, and the table controller
// (policy mode; in webhook mode too where the API server serves the policies and the table's CRD is
// installed, so that a switch to policy mode finds every revision's entry).
type admission struct {
	o     *Options
	kube  *kube.Clients
	table *policy.Controller
}

// newAdmission resolves -pinning-admission and builds the table controller. nil without -pinning.
func newAdmission(ctx context.Context, o *Options, clients *kube.Clients, cs *caches.Caches, writer *attach.Writer,
	events *attach.RecorderEvents, m *metrics.Metrics) (*admission, error) {
	if !o.Pinning.Enabled {
		return nil, nil
	}
	a := &o.Pinning.Admission
	want, err := policy.ParseMode(a.Mode)
	if err != nil {
		return nil, err
	}
	if a.resolved, err = policy.Resolve(want, clients.Kube.Discovery()); err != nil {
		return nil, kube.Explain(err)
	}
	if a.resolved == policy.Webhook && o.Pinning.URL == "" && o.Pinning.Service == "" {
		return nil, fmt.Errorf("-pinning-admission=%s chose the webhook (the API server does not serve mutatingadmissionpolicies in admissionregistration.k8s.io/v1, "+
			"or the PinTable CRD is not installed): give -webhook-url=https://127.0.0.1:PORT or -webhook-service=NAMESPACE/NAME, or apply the CRD", a.Mode)
	}
	log := logging.FromContext(ctx)
	log.Info("pinning admission", "mode", a.resolved, "asked", a.Mode)
	served, err := policy.TableServed(clients.Kube.Discovery())
	if err != nil {
		return nil, kube.Explain(err)
	}
	adm := &admission{o: o, kube: clients}
	policyServed := a.resolved == policy.Policy
	if !policyServed {
		if policyServed, err = policy.PolicyServed(clients.Kube.Discovery()); err != nil {
			return nil, kube.Explain(err)
		}
	}
	switch {
	case !served || !policyServed: // policy mode has both (Resolve)
		return adm, nil // webhook mode with no policy mode to switch to
	}
	adm.table, err = policy.New(cs, policy.Clients{Kube: clients.Kube, Dynamic: clients.Dynamic},
		&pinning.Taker{Kube: clients.Kube, Writer: writer}, events.Recorder, m,
		policy.Options{Take: a.resolved == policy.Policy, MaxTableBytes: a.TableMaxBytes, Namespaces: o.Namespaces, WaitWarning: a.WaitWarning})
	if err != nil {
		return nil, err
	}
	return adm, nil
}

// webhook reports whether the webhook is served (webhook mode).
func (a *admission) webhook() bool {
	return a != nil && a.o.Pinning.Admission.resolved == policy.Webhook
}

// loops are the controllers the leader runs for admission.
func (a *admission) loops() []*reconcile.Loop {
	if a == nil || a.table == nil {
		return nil
	}
	return []*reconcile.Loop{a.table.Loop()}
}

// start starts the tables' cache and waits for it.
func (a *admission) start(ctx context.Context) bool {
	if a == nil || a.table == nil {
		return true
	}
	a.table.Start(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), a.table.HasSynced)
}

// lead runs on the leader: in policy mode it applies the policies (unless the chart renders them) and
// takes the webhook out; in webhook mode it takes the policies out once the webhook answers (a switch).
func (a *admission) lead(ctx context.Context) {
	if a == nil {
		return
	}
	log := logging.FromContext(ctx)
	po := a.o.Pinning
	var err error
	switch {
	case po.Admission.resolved == policy.Policy:
		if po.Admission.ApplyPolicies {
			objs := policy.Build(policy.Config{Name: po.policyName(), OwnNamespace: a.o.LeaderElection.Namespace, Namespaces: a.o.Namespaces})
			if err = policy.Apply(ctx, a.kube.Kube, objs); err != nil {
				break
			}
		}
		err = policy.RetireWebhook(ctx, a.kube.Kube, policy.WebhookLeftovers{Configuration: po.Configuration, SecretNamespace: a.o.LeaderElection.Namespace,
			Secret: po.certSecret(), Service: po.Service})
	case a.table != nil: // webhook mode where the policies are served: a switch may have left them
		err = policy.RetirePolicies(ctx, a.kube.Kube, po.policyName(), po.Configuration)
	}
	if err != nil && ctx.Err() == nil {
		log.Error("switching pinning's admission", "mode", po.Admission.resolved, "err", err)
	}
}
