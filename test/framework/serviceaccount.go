package framework

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// EnforcesOwnerReferencePermissions reports whether the API server runs the
// OwnerReferencesPermissionEnforcement admission plugin, which lets only clients allowed to delete an
// object change its ownerReferences. It asks, as a ServiceAccount of ns that may patch but not delete
// ConfigMaps, for a server-side dry run adding an ownerReference: nothing is changed. dir receives
// the ServiceAccount's kubeconfig.
func (c *Cluster) EnforcesOwnerReferencePermissions(ctx context.Context, ns, dir string) (bool, error) {
	const name = "ownerref-permission-probe"
	core := c.Kube.CoreV1()
	var owner types.UID
	for _, n := range []string{name, name + "-owner"} {
		cm, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = core.ConfigMaps(ns).Get(ctx, n, metav1.GetOptions{})
		}
		if err != nil {
			return false, err
		}
		owner = cm.UID
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch"}}},
	}
	if _, err := c.Kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}
	if _, err := c.Kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, ns, name, dir)
	if err != nil {
		return false, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false, err
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: name + "-owner", UID: owner},
	}}})
	if err != nil {
		return false, err
	}
	// RBAC may take a moment to see the new binding: retry a plain Forbidden briefly.
	var last error
	err = Eventually(ctx, probeWait, "the ownerReference permission probe", func(ctx context.Context) (bool, string, error) {
		_, last = sa.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case last == nil:
			return true, "", nil
		case apierrors.IsForbidden(last) && strings.Contains(last.Error(), "cannot set an ownerRef"):
			return true, "", nil
		case apierrors.IsForbidden(last):
			return false, last.Error(), nil
		}
		return false, "", last
	})
	if err != nil {
		return false, err
	}
	if last != nil {
		return true, nil
	}
	return false, nil
}

// probeWait bounds the wait for a new RoleBinding to take effect (RBAC caches refresh in about a second).
const probeWait = 10 * time.Second
