package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

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
