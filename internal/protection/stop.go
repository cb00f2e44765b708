package protection

import (
	"context"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
)

// StopController scales the controller's Deployment to zero and waits until none of its pods is left,
// so that a release is not undone by a controller still adding finalizers (Helm runs pre-delete hooks
// before it deletes the Deployment). A Deployment that does not exist is already stopped.
func StopController(ctx context.Context, kube kubernetes.Interface, namespace, name string, timeout time.Duration) error {
	log := logging.FromContext(ctx)
	d, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the controller Deployment %s/%s: %w", namespace, name, err)
	}
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, ResourceVersion: ""}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}
	if _, err := kube.AppsV1().Deployments(namespace).UpdateScale(ctx, name, scale, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("scaling the controller Deployment %s/%s to 0: %w", namespace, name, err)
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return err
	}
	log.Info("stopping the controller", "deployment", namespace+"/"+name)
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			// The Deployment's pods come from its ReplicaSets; a pod that only shares its labels (the
			// release Job's, say) is not the controller.
			if owner := metav1.GetControllerOf(&p); owner != nil && owner.Kind == "ReplicaSet" {
				return false, nil
			}
		}
		return true, nil
	})
}

// DeleteWebhookConfiguration deletes the pinning webhook's MutatingWebhookConfiguration, so that no pod
// creation waits on a webhook that is going away: uninstall does it while the controller still answers,
// before stopping it. The controller never makes a configuration the chart made (it only fills in its
// caBundle), so it does not come back. Gone already is fine.
func DeleteWebhookConfiguration(ctx context.Context, kube kubernetes.Interface, name string) error {
	err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the pinning webhook (MutatingWebhookConfiguration %s): %w", name, err)
	}
	logging.FromContext(ctx).Info("took the pinning webhook out of the pod path", "configuration", name)
	return nil
}
