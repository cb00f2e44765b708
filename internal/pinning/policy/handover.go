package policy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
)

// Switching modes. Each mode's leader takes the other mode's admission out of the pod path, once its
// own is in it; until then both run, and agree: the policy's entries come from the same snapshots the
// webhook reads (the table is kept in webhook mode too, where the API server serves the policies), and
// the webhook skips a pod the policy has pinned (api.PolicyAdmittedAnnotation), so it is never asked
// while it may not answer yet.
//
// | mode of the leader | the other mode's objects | taken out |
// | --- | --- | --- |
// | policy | the webhook's configuration (made by the controller at -webhook-url; by the chart, which keeps it during the switch: configmap-attacher.webhookTransition), its Service and its certificate Secret | once the policies are applied, after HandoverDelay |
// | webhook | the policies' bindings and the policies (the chart renders them during a switch: TransitionNote) | once the webhook answers with a certificate the registered caBundle verifies, continuously for HandoverDelay |

// HandoverDelay is how long the new mode's admission must have been in place before the other's is
// taken out: kube-apiserver reads admission configuration and policies through informers, on every
// API server of the cluster.
const HandoverDelay = 10 * time.Second

// Apply makes the live policy objects say objs (server-side apply with our field manager, forced:
// controller-owned mode, the webhook's -webhook-url counterpart), policies before their bindings, the
// mutating binding before the validating ones (which refuse a pod the mutating one did not pin).
func Apply(ctx context.Context, kube kubernetes.Interface, objs Objects) error {
	ar := kube.AdmissionregistrationV1()
	opts := metav1.PatchOptions{FieldManager: api.FieldManager, Force: ptr.To(true)}
	mutating := func(ctx context.Context, n string, b []byte) error {
		_, err := ar.MutatingAdmissionPolicies().Patch(ctx, n, types.ApplyPatchType, b, opts)
		return err
	}
	validating := func(ctx context.Context, n string, b []byte) error {
		_, err := ar.ValidatingAdmissionPolicies().Patch(ctx, n, types.ApplyPatchType, b, opts)
		return err
	}
	mutatingBinding := func(ctx context.Context, n string, b []byte) error {
		_, err := ar.MutatingAdmissionPolicyBindings().Patch(ctx, n, types.ApplyPatchType, b, opts)
		return err
	}
	validatingBinding := func(ctx context.Context, n string, b []byte) error {
		_, err := ar.ValidatingAdmissionPolicyBindings().Patch(ctx, n, types.ApplyPatchType, b, opts)
		return err
	}
	for _, o := range []struct {
		obj   any
		kind  string
		name  string
		patch func(context.Context, string, []byte) error
	}{
		{objs.Mutating, "MutatingAdmissionPolicy", objs.Mutating.Name, mutating},
		{objs.Validating, "ValidatingAdmissionPolicy", objs.Validating.Name, validating},
		{objs.Tables, "ValidatingAdmissionPolicy", objs.Tables.Name, validating},
		{objs.MutatingBinding, "MutatingAdmissionPolicyBinding", objs.MutatingBinding.Name, mutatingBinding},
		{objs.ValidatingBinding, "ValidatingAdmissionPolicyBinding", objs.ValidatingBinding.Name, validatingBinding},
		{objs.TablesBinding, "ValidatingAdmissionPolicyBinding", objs.TablesBinding.Name, validatingBinding},
	} {
		body, err := json.Marshal(o.obj)
		if err != nil {
			return err
		}
		if err := o.patch(ctx, o.name, body); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.kind, o.name, err)
		}
	}
	logging.FromContext(ctx).Info("admission policies applied", "name", objs.Mutating.Name)
	return nil
}

// policyObject is one of pinning's admission policy objects: its kind and name, and how to get and
// delete it.
type policyObject struct {
	kind, name string
	get        func(context.Context, string, metav1.GetOptions) error
	del        func(context.Context, string, metav1.DeleteOptions) error
}

// policyObjects are pinning's admission policy objects named after name, in the order they are taken
// out of the pod path: the validating bindings (which refuse a pod the mutating policy did not pin),
// the mutating binding, then the policies.
func policyObjects(kube kubernetes.Interface, name string) []policyObject {
	ar := kube.AdmissionregistrationV1()
	vb, mb, mp, vp := ar.ValidatingAdmissionPolicyBindings(), ar.MutatingAdmissionPolicyBindings(), ar.MutatingAdmissionPolicies(), ar.ValidatingAdmissionPolicies()
	getVB := func(ctx context.Context, n string, o metav1.GetOptions) error {
		_, err := vb.Get(ctx, n, o)
		return err
	}
	getVP := func(ctx context.Context, n string, o metav1.GetOptions) error {
		_, err := vp.Get(ctx, n, o)
		return err
	}
	getMB := func(ctx context.Context, n string, o metav1.GetOptions) error {
		_, err := mb.Get(ctx, n, o)
		return err
	}
	getMP := func(ctx context.Context, n string, o metav1.GetOptions) error {
		_, err := mp.Get(ctx, n, o)
		return err
	}
	tables := TablesPolicyName(name)
	return []policyObject{
		{"ValidatingAdmissionPolicyBinding", name, getVB, vb.Delete},
		{"ValidatingAdmissionPolicyBinding", tables, getVB, vb.Delete},
		{"MutatingAdmissionPolicyBinding", name, getMB, mb.Delete},
		{"MutatingAdmissionPolicy", name, getMP, mp.Delete},
		{"ValidatingAdmissionPolicy", name, getVP, vp.Delete},
		{"ValidatingAdmissionPolicy", tables, getVP, vp.Delete},
	}
}

// DeletePolicies takes pinning's admission policies named name out of the pod path: the validating
// bindings first, and the mutating one only HandoverDelay later, once every kube-apiserver has let go
// of the validating ones: they refuse a pod the mutating one did not pin, so for a moment the other
// way round every pod of a pinned revision would be refused. kube-apiserver reloads policies about
// once a second after its informers deliver the change, but on a loaded control plane, or one of
// several API servers, delivery can take seconds more (2 s left no margin on a loaded 2-core CI
// machine: TestPolicyUninstallTakesTheBindingsOutFirst), and a mutating binding kept longer costs
// nothing (it only pins). Then the policies. Gone already is fine. What `release
// -delete-admission-policy` and a webhook-mode leader taking over do.
func DeletePolicies(ctx context.Context, kube kubernetes.Interface, name string) error {
	deleted := false
	for _, o := range policyObjects(kube, name) {
		if o.kind == "MutatingAdmissionPolicyBinding" && deleted {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(HandoverDelay):
			}
		}
		err := o.del(ctx, o.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", o.kind, o.name, err)
		}
		if err == nil && o.kind == "ValidatingAdmissionPolicyBinding" {
			deleted = true
		}
	}
	logging.FromContext(ctx).Info("took the admission policies out of the pod path", "name", name)
	return nil
}

// policiesPresent reports whether any of pinning's admission policy objects named after name exists.
func policiesPresent(ctx context.Context, kube kubernetes.Interface, name string) (bool, error) {
	for _, o := range policyObjects(kube, name) {
		switch err := o.get(ctx, o.name, metav1.GetOptions{}); {
		case err == nil:
			return true, nil
		case !apierrors.IsNotFound(err):
			return false, err
		}
	}
	return false, nil
}

// WebhookLeftovers names what the webhook mode left: its configuration, its certificate Secret, and (behind
// the chart's Service) the Service, "NAMESPACE/NAME" or empty.
type WebhookLeftovers struct {
	Configuration, SecretNamespace, Secret, Service string
}

// RetireWebhook is what a policy-mode leader does once its policies are in place: after HandoverDelay,
// it deletes the webhook's configuration (if it holds our webhook), its Service and its certificate
// Secret. It returns when done or ctx ends.
func RetireWebhook(ctx context.Context, kube kubernetes.Interface, w WebhookLeftovers) error {
	configuration, namespace, secret := w.Configuration, w.SecretNamespace, w.Secret
	svcNS, svcName, _ := strings.Cut(w.Service, "/")
	cfg, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, configuration, metav1.GetOptions{})
	present := err == nil && ours(cfg)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	_, err = kube.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	secretGone := apierrors.IsNotFound(err)
	serviceGone := true
	if svcName != "" {
		_, err = kube.CoreV1().Services(svcNS).Get(ctx, svcName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		serviceGone = apierrors.IsNotFound(err)
	}
	if !present && secretGone && serviceGone {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(HandoverDelay):
	}
	if present {
		err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, configuration,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cfg.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the pinning webhook (MutatingWebhookConfiguration %s): %w", configuration, err)
		}
		logging.FromContext(ctx).Info("admission policies in place: took the pinning webhook out of the pod path", "configuration", configuration)
	}
	if err := kube.CoreV1().Secrets(namespace).Delete(ctx, secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the webhook's certificate Secret %s/%s: %w", namespace, secret, err)
	}
	if svcName != "" {
		if err := kube.CoreV1().Services(svcNS).Delete(ctx, svcName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the webhook's Service %s: %w", w.Service, err)
		}
	}
	return nil
}

// ours reports whether a webhook configuration holds pinning's webhook.
func ours(cfg *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	for _, w := range cfg.Webhooks {
		if w.Name == pinning.WebhookName {
			return true
		}
	}
	return false
}

// RetirePolicies is what a webhook-mode leader does where the API server serves the policies: once
// its webhook answers TLS with a certificate the registered caBundle verifies, continuously for
// HandoverDelay, it deletes pinning's admission policies named name (left by policy mode, or rendered
// by the chart during the switch). It polls every second until done or ctx ends.
func RetirePolicies(ctx context.Context, kube kubernetes.Interface, name, configuration string) error {
	var since time.Time
	for {
		present, err := policiesPresent(ctx, kube, name)
		if err != nil {
			logging.FromContext(ctx).Warn("looking for the admission policies", "err", err)
		}
		if err == nil && !present {
			return nil
		}
		switch err := webhookAnswers(ctx, kube, configuration); {
		case err != nil:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= HandoverDelay:
			return DeletePolicies(ctx, kube, name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// webhookAnswers is nil when the webhook of the configuration completes a TLS handshake verified by
// its registered caBundle, as kube-apiserver would make it: at its URL, or at its Service's DNS name.
func webhookAnswers(ctx context.Context, kube kubernetes.Interface, configuration string) error {
	cfg, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, configuration, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, w := range cfg.Webhooks {
		if w.Name != pinning.WebhookName {
			continue
		}
		pool := x509.NewCertPool()
		if len(w.ClientConfig.CABundle) == 0 || !pool.AppendCertsFromPEM(w.ClientConfig.CABundle) {
			return errors.New("no caBundle registered yet")
		}
		host, addr, err := endpoint(w.ClientConfig)
		if err != nil {
			return err
		}
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return fmt.Errorf("MutatingWebhookConfiguration %s has no webhook %s", configuration, pinning.WebhookName)
}

// endpoint is the host name to verify and the address to dial of a webhook's client configuration.
func endpoint(cc admissionregistrationv1.WebhookClientConfig) (host, addr string, err error) {
	if cc.URL != nil {
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return "", "", err
		}
		port := u.Port()
		if port == "" {
			port = "443"
		}
		return u.Hostname(), net.JoinHostPort(u.Hostname(), port), nil
	}
	if s := cc.Service; s != nil {
		host := s.Name + "." + s.Namespace + ".svc"
		port := int32(443)
		if s.Port != nil {
			port = *s.Port
		}
		return host, net.JoinHostPort(host, strconv.Itoa(int(port))), nil
	}
	return "", "", errors.New("the webhook has neither url nor service")
}
