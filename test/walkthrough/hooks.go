package walkthrough

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// baseAppJobValues are charts/base-app's values for a story deployed by a tool (Argo CD, Flux) with
// `attacher: job`: the story's Rollout settings, the write-up's canary; the config is set per deploy.
func baseAppJobValues(s *Story, spec framework.RolloutSpec) map[string]any {
	history := int64(10)
	if spec.RevisionHistoryLimit != nil {
		history = int64(*spec.RevisionHistoryLimit)
	}
	return map[string]any{
		"appName": s.Rollout, "replicas": int64(spec.Replicas), "revisionHistoryLimit": history,
		"strategy": "manual-canary-1-pod", "attacher": "job",
		// The local cluster runs OwnerReferencesPermissionEnforcement, as OpenShift does; the
		// option only adds delete on ConfigMaps to the hook's Role, harmless elsewhere.
		"job": map[string]any{"ownerReferencesPermissionEnforcement": true},
	}
}

// kvData is a config revision as base-app's configmaps.<key>.kv_data value.
func kvData(data map[string]string) map[string]any {
	kv := map[string]any{}
	for k, v := range data {
		kv[k] = v
	}
	return kv
}

// hookRunner runs the command of each hook Job a deploy tool creates from base-app (`attacher: job`)
// with the real binary: kwok's nodes run no container, so the Job's pod "completes" without running
// anything. The command runs with the Job's arguments and environment, authenticated as the Job's own
// ServiceAccount (the chart's, with the chart's Role); outside a pod, so IS_IN_CLUSTER=false.
type hookRunner struct {
	c   *framework.Cluster
	bin framework.Binary
	dir string // where the ServiceAccount's kubeconfig is written
	// annotation and value mark the hook Jobs: the annotation's value contains value.
	annotation, value string

	done map[types.UID]bool // hook Jobs whose command ran
	ran  int
}

// next returns the live hook Job whose command has not run yet, if any.
func (h *hookRunner) next(ctx context.Context, ns string) (*batchv1.Job, error) {
	jobs, err := h.c.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if strings.Contains(j.Annotations[h.annotation], h.value) && j.DeletionTimestamp == nil && !h.done[j.UID] {
			return j, nil
		}
	}
	return nil, nil
}

// run waits (what, for the message) for the next hook Job and runs its command; it returns the Job,
// the result and the ServiceAccount it ran as.
func (h *hookRunner) run(ctx context.Context, ns string, wait time.Duration, what string) (*batchv1.Job, framework.Result, string, error) {
	var job *batchv1.Job
	err := framework.Eventually(ctx, wait, what, func(ctx context.Context) (bool, string, error) {
		j, err := h.next(ctx, ns)
		job = j
		return j != nil, "no new hook Job", err
	})
	if err != nil {
		return nil, framework.Result{}, "", err
	}
	if h.done == nil {
		h.done = map[types.UID]bool{}
	}
	h.done[job.UID] = true
	h.ran++
	sa := job.Spec.Template.Spec.ServiceAccountName
	if _, err := h.c.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		return job, framework.Result{}, sa, fmt.Errorf("the hook's ServiceAccount (the chart's): %w", err)
	}
	kubeconfig, err := h.c.ServiceAccountKubeconfig(ctx, ns, sa, h.dir)
	if err != nil {
		return job, framework.Result{}, sa, err
	}
	c := job.Spec.Template.Spec.Containers[0]
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	env = append(env, "IS_IN_CLUSTER=false")
	r := framework.Binary{Path: h.bin.Path, Kubeconfig: kubeconfig}.Run(ctx, env, append(c.Command, c.Args...)...)
	return job, r, sa, nil
}

// expectWaiting checks what a deploy tool that holds its hook back during a canary pause leaves: no
// hook Job yet, and the canary's ConfigMap cm there (the tool manages it) but not attached to its
// ReplicaSet rs.
func (h *hookRunner) expectWaiting(ctx context.Context, ns, cm string, rs *appsv1.ReplicaSet) error {
	if job, err := h.next(ctx, ns); err != nil || job != nil {
		return fmt.Errorf("a hook Job was created while the Rollout is paused (%v)", err)
	}
	owners, exists, err := h.c.Owners(ctx, ns, refs.ConfigMap, cm)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("the canary's ConfigMap %s is missing", cm)
	}
	for _, o := range owners {
		if o.UID == rs.UID {
			return fmt.Errorf("%s is attached to the canary %s although no hook ran", cm, rs.Name)
		}
	}
	return nil
}
