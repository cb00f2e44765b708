package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
)

// Pinning's admission policy mode: the PinTable CRD, which the chart installs from its crds/ (once per
// cluster, never deleted by Helm) and a controller run without the chart needs too.

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// EnsurePinTableCRD creates the chart's PinTable CRD unless it exists, and waits until it is served.
func (c *Cluster) EnsurePinTableCRD(ctx context.Context, repoRoot string) error {
	b, err := os.ReadFile(filepath.Join(repoRoot, "charts", "configmap-attacher", "crds", "pintables.yaml"))
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return err
	}
	_, err = c.Dynamic.Resource(crdGVR).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the PinTable CRD: %w", err)
	}
	return Eventually(ctx, 30*time.Second, "the PinTable CRD served", func(ctx context.Context) (bool, string, error) {
		ok, err := policy.TableServed(c.Kube.Discovery())
		return ok, "not yet", err
	})
}

// PinTable reads the namespace's PinTable (policy.TableName).
func (c *Cluster) PinTable(ctx context.Context, ns string) (*policy.Table, error) {
	u, err := c.Dynamic.Resource(policy.GVR).Namespace(ns).Get(ctx, policy.TableName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return policy.FromUnstructured(u)
}

// WaitPolicyEffective waits until kube-apiserver enforces pinning's admission policies in ns (it loads
// policies and bindings about once a second after they change): a server-side dry run of a pod of a
// revision the table does not know is refused by the validating policy, and one reading nothing gets
// the mutating policy's mark.
func (c *Cluster) WaitPolicyEffective(ctx context.Context, ns string) error {
	yes := true
	pod := func(reads bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "probe", UID: "00000000-0000-4000-8000-00000000beef", Controller: &yes}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}}}
		if reads {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "probe"}}}}
		}
		return p
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	return Eventually(ctx, 30*time.Second, "the admission policies enforced in "+ns, func(ctx context.Context) (bool, string, error) {
		if _, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod(true), dryRun); err == nil || !strings.Contains(err.Error(), "has no entry") {
			return false, fmt.Sprintf("a pod of an unknown revision: %v", err), nil
		}
		out, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod(false), dryRun)
		if err != nil {
			return false, err.Error(), nil
		}
		_, marked := out.Annotations[api.PolicyAdmittedAnnotation]
		return marked, "not marked by the mutating policy yet", nil
	})
}
