package walkthrough

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// PinningController is `configmap-attacher controller -pinning` for the stories' namespaces: its
// webhook served on a free loopback port and registered there under its own configuration name, as
// in local runs (-webhook-url).
type PinningController struct {
	Process *framework.Process
	// Name is the MutatingWebhookConfiguration's; the serving certificate is the Secret
	// <Name>-webhook-tls in LeaseNamespace.
	Name string
	URL  string

	c *framework.Cluster
}

// LeaseNamespace is the leader election namespace, where the controller keeps the webhook's
// certificate Secret.
const LeaseNamespace = "kube-system"

// StartPinningController starts the controller with pinning for namespaces and waits until its
// webhook is registered with a caBundle. name must be unique on the cluster.
func StartPinningController(ctx context.Context, c *framework.Cluster, bin framework.Binary, name string, namespaces ...string) (*PinningController, error) {
	return startPinning(ctx, c, bin, name, nil, namespaces)
}

// StartTriggerController is StartPinningController with the config trigger on (-reloader-annotations,
// its own switch): the controller of the config-starts story.
func StartTriggerController(ctx context.Context, c *framework.Cluster, bin framework.Binary, name string, namespaces ...string) (*PinningController, error) {
	return startPinning(ctx, c, bin, name, []string{"-reloader-annotations"}, namespaces)
}

func startPinning(ctx context.Context, c *framework.Cluster, bin framework.Binary, name string, extra, namespaces []string) (*PinningController, error) {
	port, err := framework.FreeLoopbackPort()
	if err != nil {
		return nil, err
	}
	p := &PinningController{Name: name, URL: fmt.Sprintf("https://127.0.0.1:%d", port), c: c}
	args := []string{"controller", "-leader-elect=false", "-metrics-bind-address", "127.0.0.1:0", "-health-probe-bind-address", "127.0.0.1:0",
		"-pinning", "-pinning-admission=webhook", "-webhook-url=" + p.URL, "-webhook-configuration-name=" + name, "-leader-election-namespace=" + LeaseNamespace,
		"-namespaces", strings.Join(namespaces, ",")}
	args = append(args, extra...)
	if p.Process, err = bin.Start(ctx, []string{"LOG_LEVEL=warn"}, args...); err != nil {
		return nil, err
	}
	err = framework.Eventually(ctx, 30*time.Second, "the pinning webhook registered", func(ctx context.Context) (bool, string, error) {
		if p.Process.Exited() {
			return false, "", fmt.Errorf("the controller exited:\n%s", p.Process.Logs())
		}
		wc, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not yet", nil
		}
		return err == nil && len(wc.Webhooks) == 1 && len(wc.Webhooks[0].ClientConfig.CABundle) > 0, "no caBundle yet", err
	})
	if err != nil {
		_ = p.Stop(context.Background())
		return nil, err
	}
	return p, nil
}

// Stop stops the controller, then deletes what it registered: the webhook configuration (which
// would otherwise send the labelled namespaces' pods to a port nobody serves) and its certificate.
func (p *PinningController) Stop(ctx context.Context) error {
	err := p.Process.Stop()
	if e := p.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, p.Name, metav1.DeleteOptions{}); e != nil && !apierrors.IsNotFound(e) {
		err = e
	}
	if e := p.c.Kube.CoreV1().Secrets(LeaseNamespace).Delete(ctx, p.Name+"-webhook-tls", metav1.DeleteOptions{}); e != nil && !apierrors.IsNotFound(e) {
		err = e
	}
	return err
}
