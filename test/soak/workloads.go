package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// What a user (or a pipeline) does to each kind of workload.

func int32p(v int32) *int32 { return &v }

// create creates the workload from the model, its config first, and runs the Job mode if it uses it.
func (s *soak) create(ctx context.Context, w *app) error {
	if err := s.ensureConfigs(ctx, w); err != nil {
		return err
	}
	t := w.template()
	var err error
	switch w.kind {
	case canary:
		err = s.c.CreateRollout(ctx, w.ns, w.name, framework.RolloutSpec{Replicas: 2, RevisionHistoryLimit: w.historyLimit, Template: &t,
			Annotations: w.reloaderAnnotations()})
	case workloadRef:
		err = s.createWorkloadRefRollout(ctx, w, t)
	case deployment:
		_, err = s.c.CreateDeployment(ctx, w.ns, w.name, t, w.historyLimit)
	case statefulSet:
		if _, err = s.c.CreateStatefulSet(ctx, w.ns, w.name, 2, t); err == nil && w.historyLimit != nil {
			err = s.setHistoryLimit(ctx, w, *w.historyLimit)
		}
	case daemonSet:
		_, err = s.c.CreateDaemonSet(ctx, w.ns, w.name, t, w.historyLimit)
	case cronJob:
		_, err = s.c.CreateCronJob(ctx, w.ns, w.name, t)
		w.jobs = nil
	}
	if err != nil {
		return err
	}
	w.exists = true
	if err := s.annotateTriggered(ctx, w); err != nil {
		return err
	}
	return s.attachByJob(ctx, w)
}

// createWorkloadRefRollout: a Deployment scaled to 0 holds the template; the Rollout references it
// (framework.CreateWorkloadRefRollout, with the soak's template).
func (s *soak) createWorkloadRefRollout(ctx context.Context, w *app, t corev1.PodTemplateSpec) error {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: w.name + "-template", Namespace: w.ns},
		Spec: appsv1.DeploymentSpec{Replicas: int32p(0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}},
			Template: t},
	}
	if _, err := s.c.Kube.AppsV1().Deployments(w.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	spec := map[string]any{
		"replicas":    int64(2),
		"selector":    map[string]any{"matchLabels": map[string]any{"app": w.name}},
		"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": w.name + "-template"},
		"strategy": map[string]any{"canary": map[string]any{
			"maxSurge": 0, "maxUnavailable": 1,
			"steps": []any{map[string]any{"setWeight": 1}, map[string]any{"pause": map[string]any{}}},
		}},
	}
	if w.historyLimit != nil {
		spec["revisionHistoryLimit"] = int64(*w.historyLimit)
	}
	meta := map[string]any{"name": w.name, "namespace": w.ns}
	if ann := w.reloaderAnnotations(); ann != nil {
		m := map[string]any{}
		for k, v := range ann {
			m[k] = v
		}
		meta["annotations"] = m
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": meta,
		"spec":     spec,
	}}
	_, err := s.c.Dynamic.Resource(workload.RolloutGVR).Namespace(w.ns).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// apply writes the model's pod template into the workload: a deploy. The Job mode runs after it.
func (s *soak) apply(ctx context.Context, w *app) error {
	if err := s.ensureConfigs(ctx, w); err != nil {
		return err
	}
	if err := s.setTemplate(ctx, w, w.template()); err != nil {
		return fmt.Errorf("%w: %w", errNotApplied, err)
	}
	return s.attachByJob(ctx, w)
}

// ensureConfigs makes sure the config the workload's template names exists: its revisions, or its
// pinned objects with the model's content.
func (s *soak) ensureConfigs(ctx context.Context, w *app) error {
	if w.pinned {
		return s.putPins(ctx, w)
	}
	for _, name := range append(w.configMaps(), w.secrets()...) {
		if err := s.ensureConfig(ctx, w.ns, name); err != nil {
			return err
		}
	}
	return nil
}

// errNotApplied: the deploy did not reach the workload.
var errNotApplied = errors.New("not applied")

func (s *soak) setTemplate(ctx context.Context, w *app, t corev1.PodTemplateSpec) error {
	apps := s.c.Kube.AppsV1()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		switch w.kind {
		case canary:
			return s.c.SetRolloutTemplate(ctx, w.ns, w.name, t)
		case workloadRef, deployment:
			name := w.name
			if w.kind == workloadRef {
				name += "-template"
			}
			d, err := apps.Deployments(w.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template = t
			_, err = apps.Deployments(w.ns).Update(ctx, d, metav1.UpdateOptions{})
			return err
		case statefulSet:
			o, err := apps.StatefulSets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.Spec.Template = t
			_, err = apps.StatefulSets(w.ns).Update(ctx, o, metav1.UpdateOptions{})
			return err
		case daemonSet:
			o, err := apps.DaemonSets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.Spec.Template = t
			_, err = apps.DaemonSets(w.ns).Update(ctx, o, metav1.UpdateOptions{})
			return err
		case cronJob:
			o, err := s.c.Kube.BatchV1().CronJobs(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.Spec.JobTemplate.Spec.Template = t
			_, err = s.c.Kube.BatchV1().CronJobs(w.ns).Update(ctx, o, metav1.UpdateOptions{})
			return err
		}
		return fmt.Errorf("unknown kind %s", w.kind)
	})
}

// setHistoryLimit sets revisionHistoryLimit (ReplicaSets, or ControllerRevisions).
func (s *soak) setHistoryLimit(ctx context.Context, w *app, limit int32) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"revisionHistoryLimit":%d}}`, limit))
	var err error
	switch w.kind {
	case canary, workloadRef:
		_, err = s.c.Dynamic.Resource(workload.RolloutGVR).Namespace(w.ns).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	case deployment:
		_, err = s.c.Kube.AppsV1().Deployments(w.ns).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	case statefulSet:
		_, err = s.c.Kube.AppsV1().StatefulSets(w.ns).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	case daemonSet:
		_, err = s.c.Kube.AppsV1().DaemonSets(w.ns).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	default:
		return fmt.Errorf("%s has no revisionHistoryLimit", w.kind)
	}
	return err
}

// attachByJob runs the Job mode exactly as the original Job ran it (after the deploy), for the
// workloads that use it. Its output goes to jobs.log.
func (s *soak) attachByJob(ctx context.Context, w *app) error {
	if !w.jobMode {
		return nil
	}
	flag := "-rollout"
	if w.kind == deployment {
		flag = "-deployment"
	}
	args := []string{flag, w.name, "-namespace", w.ns, "-configmaps", strings.Join(w.configMaps(), ",")}
	if len(w.secrets()) > 0 {
		args = append(args, "-secrets", strings.Join(w.secrets(), ","))
	}
	args = append(args, "-timeout", "2m")
	r := s.bin.Run(ctx, []string{"LOG_LEVEL=info", "VERSION=soak"}, args...)
	f, err := os.OpenFile(filepath.Join(s.o.workDir, "jobs.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		fmt.Fprintf(f, "=== step %d %s\n%s\n", s.step, w, r)
		f.Close()
	}
	if r.Code != 0 {
		s.jobFailures++
		return fmt.Errorf("Job mode exited %d after %s: %s", r.Code, r.Duration.Round(time.Millisecond), lastLine(r.Stderr))
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// remove deletes the workload as kubectl does (background propagation: its revisions and pods go
// after it).
func (s *soak) remove(ctx context.Context, w *app) error {
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	var err error
	switch w.kind {
	case canary, workloadRef:
		err = s.c.Dynamic.Resource(workload.RolloutGVR).Namespace(w.ns).Delete(ctx, w.name, opts)
		if w.kind == workloadRef && (err == nil || apierrors.IsNotFound(err)) {
			err = s.c.Kube.AppsV1().Deployments(w.ns).Delete(ctx, w.name+"-template", opts)
		}
	case deployment:
		err = s.c.Kube.AppsV1().Deployments(w.ns).Delete(ctx, w.name, opts)
	case statefulSet:
		err = s.c.Kube.AppsV1().StatefulSets(w.ns).Delete(ctx, w.name, opts)
	case daemonSet:
		err = s.c.Kube.AppsV1().DaemonSets(w.ns).Delete(ctx, w.name, opts)
	case cronJob:
		err = s.c.Kube.BatchV1().CronJobs(w.ns).Delete(ctx, w.name, opts)
	}
	if apierrors.IsNotFound(err) {
		err = nil
	}
	if err == nil {
		w.exists = false
	}
	return err
}

// waitGone waits until the workload object itself is gone, so a recreation does not collide.
func (s *soak) waitGone(ctx context.Context, w *app) error {
	return framework.Eventually(ctx, 2*time.Minute, w.String()+" gone", func(ctx context.Context) (bool, string, error) {
		var err error
		switch w.kind {
		case canary, workloadRef:
			_, err = s.c.Dynamic.Resource(workload.RolloutGVR).Namespace(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && w.kind == workloadRef {
				_, err = s.c.Kube.AppsV1().Deployments(w.ns).Get(ctx, w.name+"-template", metav1.GetOptions{})
			}
		case deployment:
			_, err = s.c.Kube.AppsV1().Deployments(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		case statefulSet:
			_, err = s.c.Kube.AppsV1().StatefulSets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		case daemonSet:
			_, err = s.c.Kube.AppsV1().DaemonSets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		case cronJob:
			_, err = s.c.Kube.BatchV1().CronJobs(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		}
		return apierrors.IsNotFound(err), "still there", nil
	})
}

// observed waits (bounded) until the workload's controller has processed its latest spec: for
// Rollouts and Deployments, until its current ReplicaSet exists. It says what it saw; not getting
// there is reported, not fatal (the machine is shared and slow at times).
func (s *soak) observed(ctx context.Context, w *app, timeout time.Duration) string {
	start := time.Now()
	var what string
	err := framework.Eventually(ctx, timeout, "observed", func(ctx context.Context) (bool, string, error) {
		switch w.kind {
		case canary, workloadRef, deployment:
			res, err := s.resolve(ctx, w)
			if err != nil {
				return false, err.Error(), nil
			}
			rs, err := res.Current()
			if err != nil {
				return false, err.Error(), nil
			}
			what = "rs " + rs.Name
		case statefulSet:
			o, err := s.c.Kube.AppsV1().StatefulSets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil || o.Status.ObservedGeneration < o.Generation || o.Status.UpdateRevision == "" {
				return false, "not observed", nil
			}
			what = "revision " + o.Status.UpdateRevision
		case daemonSet:
			o, err := s.c.Kube.AppsV1().DaemonSets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil || o.Status.ObservedGeneration < o.Generation {
				return false, "not observed", nil
			}
			what = "observed"
		default:
			what = "applied"
		}
		return true, "", nil
	})
	if err != nil {
		return "not observed within " + timeout.String()
	}
	return fmt.Sprintf("%s in %s", what, time.Since(start).Round(100*time.Millisecond))
}

// previousRevision returns the template of the ReplicaSet with the highest revision below the
// current one: what `kubectl argo rollouts undo` and `kubectl rollout undo` go back to.
func (s *soak) previousRevision(ctx context.Context, w *app) (*appsv1.ReplicaSet, error) {
	res, err := s.resolve(ctx, w)
	if err != nil {
		return nil, err
	}
	// Owned is newest revision first; the first is the current one.
	for i, rs := range res.Owned {
		if i > 0 && rs.DeletionTimestamp == nil {
			return rs, nil
		}
	}
	return nil, nil
}

// fromTemplate updates the model from a template the cluster holds (after undo).
func (s *soak) fromTemplate(w *app, t *corev1.PodTemplateSpec) {
	w.own, w.shared, w.secret = "", "", ""
	for name := range templateRefs(&t.Spec) {
		kind, n, _ := strings.Cut(name, "/")
		switch {
		case kind == "Secret":
			w.secret = n
		case strings.HasPrefix(n, "shared-cm-"):
			w.shared = n
		default:
			w.own = n
		}
	}
	if len(t.Spec.Containers) > 0 {
		w.image = t.Spec.Containers[0].Image
	}
}

// undo sets the workload's template back to its previous revision's. It returns the revision used,
// or "" when there is none (pruned).
func (s *soak) undo(ctx context.Context, w *app) (string, error) {
	rs, err := s.previousRevision(ctx, w)
	if err != nil || rs == nil {
		return "", err
	}
	t := *rs.Spec.Template.DeepCopy()
	delete(t.Labels, workload.RolloutHashLabel)
	delete(t.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	if err := s.setTemplate(ctx, w, t); err != nil {
		return "", err
	}
	if w.pinned {
		// Only the template goes back, as `kubectl argo rollouts undo` does: the pinned objects keep
		// their content, and the old revision its snapshot.
		w.checksum, w.image = t.Annotations[checksumAnnotation], t.Spec.Containers[0].Image
	} else {
		s.fromTemplate(w, &t)
	}
	if err := s.attachByJob(ctx, w); err != nil {
		return rs.Name, err
	}
	return rs.Name, nil
}

// jobFromCronJob does what `kubectl create job --from=cronjob/NAME` does.
func (s *soak) jobFromCronJob(ctx context.Context, w *app) (string, error) {
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.ns}}
	name := fmt.Sprintf("%s-s%d", w.name, s.step)
	if _, err := s.c.JobFrom(ctx, cj, name); err != nil {
		return "", err
	}
	w.jobs = append(w.jobs, name)
	return name, nil
}

// pruneJobs deletes all but the newest keep Jobs created from the CronJob (a history limit).
func (s *soak) pruneJobs(ctx context.Context, w *app, keep int) ([]string, error) {
	bg := metav1.DeletePropagationBackground
	var deleted []string
	for len(w.jobs) > keep {
		name := w.jobs[0]
		err := s.c.Kube.BatchV1().Jobs(w.ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			return deleted, err
		}
		w.jobs = w.jobs[1:]
		deleted = append(deleted, name)
	}
	return deleted, nil
}

// rolloutTemplate reads a Rollout's spec.template (nil with workloadRef).
func rolloutTemplate(u *unstructured.Unstructured) (*corev1.PodTemplateSpec, error) {
	m, found, err := unstructured.NestedMap(u.Object, "spec", "template")
	if err != nil || !found {
		return nil, err
	}
	t := &corev1.PodTemplateSpec{}
	return t, runtime.DefaultUnstructuredConverter.FromUnstructured(m, t)
}

// controllerRevisionTemplate decodes the pod template a StatefulSet's or DaemonSet's
// ControllerRevision keeps (a patch holding spec.template).
func controllerRevisionTemplate(cr *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	raw := cr.Data.Raw
	if len(raw) == 0 && cr.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(cr.Data.Object); err != nil {
			return nil, err
		}
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, err
	}
	return &data.Spec.Template, nil
}
