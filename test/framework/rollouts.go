package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/adler32"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// MountPath is where the original chart mounts its projected config volume.
const MountPath = "/etc/kubernetes/configmaps"

// RevisionedName names a config revision the way the original chart did: <base>-<adler32 of the
// content>, so the demo shows names like demo-cm-2648648036.
func RevisionedName(base string, data map[string]string) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := adler32.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s\x00%s\x00", k, data[k])
	}
	return fmt.Sprintf("%s-%d", base, h.Sum32())
}

// CreateNamespace creates ns (fine if it exists).
func (c *Cluster) CreateNamespace(ctx context.Context, ns string) error {
	_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// DeleteNamespace deletes ns without waiting.
func (c *Cluster) DeleteNamespace(ctx context.Context, ns string) error {
	err := c.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// CreateConfigRevision creates an immutable ConfigMap named by its content and returns it. optedIn
// sets the label the controller requires (the chart and the renderer set it).
func (c *Cluster) CreateConfigRevision(ctx context.Context, ns, base string, data map[string]string, optedIn bool) (*corev1.ConfigMap, error) {
	yes := true
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RevisionedName(base, data), Namespace: ns, Labels: map[string]string{"app": strings.TrimSuffix(base, "-cm")}},
		Data:       data,
		Immutable:  &yes,
	}
	if optedIn {
		cm.Labels[api.RevisionedLabel] = api.RevisionedValue
	}
	out, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	}
	return out, err
}

// PutConfigMap creates or overwrites a plain, mutable ConfigMap: the classic, unrevisioned approach.
func (c *Cluster) PutConfigMap(ctx context.Context, ns, name string, data map[string]string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
	out, err := c.Kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	}
	return out, err
}

// RolloutSpec is what the walkthrough varies.
type RolloutSpec struct {
	Replicas             int32
	RevisionHistoryLimit *int32
	ConfigMaps           []string
	Secrets              []string
	// Template, when set, is used instead of PodTemplate(ConfigMaps, Secrets).
	Template *corev1.PodTemplateSpec
	// Annotations are the Rollout's own (metadata.annotations), e.g. ReloaderAuto.
	Annotations map[string]string
}

// PodTemplate mounts the ConfigMaps through one projected volume at MountPath (as the original chart)
// and the Secrets through envFrom.
func PodTemplate(app string, configMaps, secrets []string) corev1.PodTemplateSpec {
	var sources []corev1.VolumeProjection
	for _, n := range configMaps {
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	c := corev1.Container{Name: app, Image: "nginx:1.27"}
	for _, n := range secrets {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}
	if len(sources) > 0 {
		t.Spec.Volumes = []corev1.Volume{{Name: "configmaps-volume", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}}
		t.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "configmaps-volume", MountPath: MountPath}}
	}
	return t
}

// canary is the write-up's strategy: replace one pod, then wait for a human.
var canary = map[string]any{"canary": map[string]any{
	"maxSurge": 0, "maxUnavailable": 1,
	"steps": []any{map[string]any{"setWeight": 1}, map[string]any{"pause": map[string]any{}}},
}}

// CreateRollout creates a Rollout with the write-up's canary strategy.
func (c *Cluster) CreateRollout(ctx context.Context, ns, name string, spec RolloutSpec) error {
	t := spec.Template
	if t == nil {
		t = ptrTo(PodTemplate(name, spec.ConfigMaps, spec.Secrets))
	}
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(t)
	if err != nil {
		return err
	}
	s := map[string]any{
		"replicas": int64(spec.Replicas),
		"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
		"template": tmpl,
		"strategy": canary,
	}
	if spec.RevisionHistoryLimit != nil {
		s["revisionHistoryLimit"] = int64(*spec.RevisionHistoryLimit)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": rolloutMeta(ns, name, spec),
		"spec":     s,
	}}
	_, err = c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	return err
}

func rolloutMeta(ns, name string, spec RolloutSpec) map[string]any {
	meta := map[string]any{"name": name, "namespace": ns}
	if len(spec.Annotations) > 0 {
		a := map[string]any{}
		for k, v := range spec.Annotations {
			a[k] = v
		}
		meta["annotations"] = a
	}
	return meta
}

// CreateWorkloadRefRollout creates a Deployment holding the pod template (scaled to 0; spec.Template
// or PodTemplate(ConfigMaps, Secrets)) and a Rollout referencing it through spec.workloadRef.
func (c *Cluster) CreateWorkloadRefRollout(ctx context.Context, ns, name string, spec RolloutSpec) error {
	zero := int32(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-template", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: PodTemplate(name, spec.ConfigMaps, spec.Secrets),
		},
	}
	if spec.Template != nil {
		d.Spec.Template = *spec.Template
	}
	if _, err := c.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": rolloutMeta(ns, name, spec),
		"spec": map[string]any{
			"replicas":    int64(spec.Replicas),
			"selector":    map[string]any{"matchLabels": map[string]any{"app": name}},
			"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name + "-template"},
			"strategy":    canary,
		},
	}}
	_, err := c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// SetRolloutConfig points the Rollout's pod template at other config revisions: a deploy.
func (c *Cluster) SetRolloutConfig(ctx context.Context, ns, name string, configMaps, secrets []string) error {
	return c.SetRolloutTemplate(ctx, ns, name, PodTemplate(name, configMaps, secrets))
}

// SetRolloutTemplate replaces the Rollout's pod template: a deploy.
func (c *Cluster) SetRolloutTemplate(ctx context.Context, ns, name string, t corev1.PodTemplateSpec) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": t}})
	if err != nil {
		return err
	}
	_, err = c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// SetDeploymentConfig changes a Deployment's template (a Deployment deploy, or a workloadRef template).
func (c *Cluster) SetDeploymentConfig(ctx context.Context, ns, name, app string, configMaps, secrets []string) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": PodTemplate(app, configMaps, secrets)}})
	if err != nil {
		return err
	}
	_, err = c.Kube.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// SetRevisionHistoryLimit sets the Rollout's revisionHistoryLimit: Argo Rollouts prunes the older
// ReplicaSets beyond it.
func (c *Cluster) SetRevisionHistoryLimit(ctx context.Context, ns, name string, limit int) error {
	patch := fmt.Sprintf(`{"spec":{"revisionHistoryLimit":%d}}`, limit)
	_, err := c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// Promote does what `kubectl argo rollouts promote` does: unpause the spec and clear the pause
// conditions through the status subresource, at whatever step the Rollout is (the soak's promote,
// drawn at random); a story that waits at the canary's pause promotes with PromotePaused.
func (c *Cluster) Promote(ctx context.Context, ns, name string) error {
	ro, err := c.Rollout(ctx, ns, name)
	if err != nil {
		return err
	}
	ri := c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns)
	if _, err := ri.Patch(ctx, name, types.MergePatchType, []byte(`{"status":{"pauseConditions":null}}`), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("promote %s/%s: %w", ns, name, err)
	}
	if ro.Paused {
		if _, err := ri.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("promote %s/%s: %w", ns, name, err)
		}
	}
	return nil
}

// PromotePaused promotes the way a person at the terminal does: once `kubectl argo rollouts get
// rollout` shows the canary Paused (WaitPaused), never before, for a promotion that comes before the
// pause is recorded clears nothing and the canary waits for ever.
func (c *Cluster) PromotePaused(ctx context.Context, timeout time.Duration, ns, name string) error {
	if err := c.WaitPaused(ctx, timeout, ns, name); err != nil {
		return err
	}
	return c.Promote(ctx, ns, name)
}

// Abort does what `kubectl argo rollouts abort` does.
func (c *Cluster) Abort(ctx context.Context, ns, name string) error {
	_, err := c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"status":{"abort":true}}`), metav1.PatchOptions{}, "status")
	return err
}

// Undo does what `kubectl argo rollouts undo --to-revision` does: copy that revision's ReplicaSet
// template (without the hash label) back into the Rollout.
func (c *Cluster) Undo(ctx context.Context, ns, name string, number int64) error {
	res, err := c.Resolve(ctx, ns, name)
	if err != nil {
		return err
	}
	for _, rs := range res.Owned {
		if revision.Number(rs.Annotations) == number {
			t := *rs.Spec.Template.DeepCopy()
			delete(t.Labels, workload.RolloutHashLabel)
			return c.SetRolloutTemplate(ctx, ns, name, t)
		}
	}
	return fmt.Errorf("undo %s/%s: no ReplicaSet at revision %d", ns, name, number)
}

// RolloutInfo is the Rollout fields the stories read.
type RolloutInfo struct {
	Paused bool
	*workload.RolloutObject
}

// Rollout reads a Rollout.
func (c *Cluster) Rollout(ctx context.Context, ns, name string) (*RolloutInfo, error) {
	u, err := c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ro, err := workload.RolloutFromUnstructured(u)
	if err != nil {
		return nil, err
	}
	paused, _, _ := unstructured.NestedBool(u.Object, "spec", "paused")
	return &RolloutInfo{Paused: paused, RolloutObject: ro}, nil
}

// Resolve reads a Rollout with its ReplicaSets (newest revision first).
func (c *Cluster) Resolve(ctx context.Context, ns, name string) (*workload.Resolved, error) {
	return c.ResolveWorkload(ctx, workload.Ref{Kind: workload.Rollout, Namespace: ns, Name: name})
}

// ResolveWorkload reads a Rollout or Deployment with its ReplicaSets (newest revision first).
func (c *Cluster) ResolveWorkload(ctx context.Context, ref workload.Ref) (*workload.Resolved, error) {
	return workload.Resolve(ctx, workload.ClientSource{Kube: c.Kube, Dynamic: c.Dynamic}, ref)
}

// WaitPaused waits until the Rollout stops at a pause: {} step (a pause condition is recorded), as a
// user sees it in `kubectl argo rollouts get rollout` before promoting. Promoting earlier is lost: the
// controller records the pause after the promotion cleared nothing, and the canary waits for ever.
func (c *Cluster) WaitPaused(ctx context.Context, timeout time.Duration, ns, name string) error {
	return Eventually(ctx, timeout, "Rollout "+ns+"/"+name+" to pause", func(ctx context.Context) (bool, string, error) {
		u, err := c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "pauseConditions")
		return len(conds) > 0, "not paused", nil
	})
}

// RevisionOf returns a ReplicaSet's revision as a string for messages.
func RevisionOf(rs *appsv1.ReplicaSet) string {
	return strconv.FormatInt(revision.Number(rs.Annotations), 10)
}

func ptrTo[T any](v T) *T { return &v }
