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

// DeletePinTableCRD deletes the PinTable CRD (and with it every table of the cluster) and waits until
// it is no longer served.
func (c *Cluster) DeletePinTableCRD(ctx context.Context) error {
	err := c.Dynamic.Resource(crdGVR).Delete(ctx, policy.Resource+"."+policy.Group, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the PinTable CRD: %w", err)
	}
	return Eventually(ctx, 2*time.Minute, "the PinTable CRD gone", func(ctx context.Context) (bool, string, error) {
		_, err := c.Dynamic.Resource(crdGVR).Get(ctx, policy.Resource+"."+policy.Group, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, "still there", nil
		}
		ok, err := policy.TableServed(c.Kube.Discovery())
		return !ok, "still served", err
	})
}

// PinTables reads every PinTable of the namespace, by name.
func (c *Cluster) PinTables(ctx context.Context, ns string) (map[string]*policy.Table, error) {
	list, err := c.Dynamic.Resource(policy.GVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]*policy.Table{}
	for i := range list.Items {
		t, err := policy.FromUnstructured(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out[t.Name] = t
	}
	return out, nil
}

// PinTable reads the namespace's PinTable (policy.TableName).
func (c *Cluster) PinTable(ctx context.Context, ns string) (*policy.Table, error) {
	u, err := c.Dynamic.Resource(policy.GVR).Namespace(ns).Get(ctx, policy.TableName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return policy.FromUnstructured(u)
}

// ProbePod is a pod of a ReplicaSet nobody has (no table has its entry), reading ConfigMap reads
// (none when empty).
func ProbePod(ns, reads string) *corev1.Pod {
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "probe", UID: "00000000-0000-4000-8000-00000000beef", Controller: &yes}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}}}
	if reads != "" {
		p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: reads}}}}
	}
	return p
}

// DryRun is a server-side dry run of creating pod: admission without a pod.
func (c *Cluster) DryRun(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	return c.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

// WaitGateEffective waits until kube-apiserver enforces pinning's gate in ns (it loads policies and
// bindings about once a second after they change, and reads namespaces' labels through a cache): a
// server-side dry run of a pod of a revision no table knows, reading a ConfigMap, is refused.
func (c *Cluster) WaitGateEffective(ctx context.Context, ns string) error {
	return Eventually(ctx, 30*time.Second, "the gate enforced in "+ns, func(ctx context.Context) (bool, string, error) {
		_, err := c.DryRun(ctx, ProbePod(ns, "probe"))
		return err != nil && strings.Contains(err.Error(), "has no entry"), fmt.Sprintf("a pod of an unknown revision: %v", err), nil
	})
}

// WaitPolicyEffective waits until kube-apiserver enforces pinning's admission policies in ns: the gate
// refuses a pod of a revision the tables do not know (WaitGateEffective), and a pod reading nothing
// gets the mutating policy's mark (the namespace has a table).
func (c *Cluster) WaitPolicyEffective(ctx context.Context, ns string) error {
	if err := c.WaitGateEffective(ctx, ns); err != nil {
		return err
	}
	return Eventually(ctx, 30*time.Second, "the mutating policy enforced in "+ns, func(ctx context.Context) (bool, string, error) {
		out, err := c.DryRun(ctx, ProbePod(ns, ""))
		if err != nil {
			return false, err.Error(), nil
		}
		_, marked := out.Annotations[api.PolicyAdmittedAnnotation]
		return marked, "not marked by the mutating policy yet", nil
	})
}
