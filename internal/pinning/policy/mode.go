package policy

import (
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// Mode is how pods are pinned: -pinning-admission and the chart's pinning.admission (these words
// exactly).
type Mode string

const (
	// Auto picks Policy where the API server serves mutatingadmissionpolicies in
	// admissionregistration.k8s.io/v1 (Kubernetes ≥ 1.36), else Webhook.
	Auto Mode = "auto"
	// Policy: the API server pins (admission policies over the PinTables); nothing of ours on the pod
	// path.
	Policy Mode = "policy"
	// Webhook: our mutating admission webhook pins (Kubernetes 1.35, or by choice).
	Webhook Mode = "webhook"
)

// Modes are the words -pinning-admission takes.
func Modes() []Mode { return []Mode{Auto, Policy, Webhook} }

// ParseMode reads -pinning-admission.
func ParseMode(s string) (Mode, error) {
	if m := Mode(s); slices.Contains(Modes(), m) {
		return m, nil
	}
	return "", fmt.Errorf("-pinning-admission %q: use auto, policy or webhook", s)
}

// PolicyServed reports whether the API server serves mutatingadmissionpolicies in
// admissionregistration.k8s.io/v1 (GA in 1.36: on by default).
func PolicyServed(d discovery.DiscoveryInterface) (bool, error) {
	return served(d, "admissionregistration.k8s.io/v1", "mutatingadmissionpolicies")
}

// TableServed reports whether the PinTable CRD is installed.
func TableServed(d discovery.DiscoveryInterface) (bool, error) {
	return served(d, Group+"/"+Version, Resource)
}

func served(d discovery.DiscoveryInterface, gv, resource string) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discovering %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// Resolve turns auto into the mode the API server allows: policy where it serves the admission
// policies and the PinTable CRD is installed, else webhook (the chart decides the same, and
// docs/pinning.md says so: an upgrade from a chart without the CRD stays at the webhook until the CRD
// is applied). policy where either is missing is an error naming the fix.
func Resolve(m Mode, d discovery.DiscoveryInterface) (Mode, error) {
	if m == Webhook {
		return m, nil
	}
	ok, err := PolicyServed(d)
	if err != nil {
		return "", err
	}
	if !ok {
		if m == Auto {
			return Webhook, nil
		}
		return "", fmt.Errorf("-pinning-admission=policy: the API server does not serve mutatingadmissionpolicies in admissionregistration.k8s.io/v1 " +
			"(Kubernetes 1.36 or later): use -pinning-admission=webhook (or auto)")
	}
	if ok, err = TableServed(d); err != nil {
		return "", err
	}
	switch {
	case ok:
		return Policy, nil
	case m == Auto:
		return Webhook, nil
	}
	return "", fmt.Errorf("policy mode needs the PinTable CRD (%s.%s): apply charts/configmap-attacher/crds/pintables.yaml "+
		"(Helm installs it with the chart, but only at install, not on upgrade)", Resource, Group)
}
