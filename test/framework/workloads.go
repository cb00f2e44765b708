package framework

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Workloads of every kind, each with the pod template PodTemplate builds: what in-use protection and
// the revisions of every kind are proved on.

func selector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

// CreateDeployment creates a Deployment of one replica running t.
func (c *Cluster) CreateDeployment(ctx context.Context, ns, name string, t corev1.PodTemplateSpec, historyLimit *int32) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptrTo(int32(1)), Selector: selector(t.Labels["app"]), Template: t, RevisionHistoryLimit: historyLimit}}
	return c.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
}

// CreateStatefulSet creates a StatefulSet of replicas pods running t, updated with RollingUpdate and
// the given partition (pods with an ordinal below it keep the old revision).
func (c *Cluster) CreateStatefulSet(ctx context.Context, ns, name string, replicas int32, t corev1.PodTemplateSpec) (*appsv1.StatefulSet, error) {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: selector(t.Labels["app"]), Template: t, ServiceName: name,
			PodManagementPolicy: appsv1.ParallelPodManagement}}
	return c.Kube.AppsV1().StatefulSets(ns).Create(ctx, s, metav1.CreateOptions{})
}

// CreateDaemonSet creates a DaemonSet running t on every node.
func (c *Cluster) CreateDaemonSet(ctx context.Context, ns, name string, t corev1.PodTemplateSpec, historyLimit *int32) (*appsv1.DaemonSet, error) {
	d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: selector(t.Labels["app"]), Template: t, RevisionHistoryLimit: historyLimit}}
	return c.Kube.AppsV1().DaemonSets(ns).Create(ctx, d, metav1.CreateOptions{})
}

// CreateCronJob creates a suspended CronJob running t (jobs are created from it by hand: JobFrom).
func (c *Cluster) CreateCronJob(ctx context.Context, ns, name string, t corev1.PodTemplateSpec) (*batchv1.CronJob, error) {
	t.Spec.RestartPolicy = corev1.RestartPolicyNever
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", Suspend: ptrTo(true),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: t}}}}
	return c.Kube.BatchV1().CronJobs(ns).Create(ctx, cj, metav1.CreateOptions{})
}

// JobFrom does what `kubectl create job NAME --from=cronjob/CJ` does: a Job from the CronJob's current
// template, controlled by the CronJob.
func (c *Cluster) JobFrom(ctx context.Context, cj *batchv1.CronJob, name string) (*batchv1.Job, error) {
	cj, err := c.Kube.BatchV1().CronJobs(cj.Namespace).Get(ctx, cj.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cj.Namespace,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}},
		Spec: cj.Spec.JobTemplate.Spec}
	return c.Kube.BatchV1().Jobs(cj.Namespace).Create(ctx, j, metav1.CreateOptions{})
}

// CreatePod creates a bare pod (no controller) running t.
func (c *Cluster) CreatePod(ctx context.Context, ns, name string, t corev1.PodTemplateSpec) (*corev1.Pod, error) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: t.Labels}, Spec: t.Spec}
	return c.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
}

// ControllerRevisions returns the ControllerRevisions a StatefulSet or DaemonSet owns, oldest first.
func (c *Cluster) ControllerRevisions(ctx context.Context, ns string, owner types.UID) ([]appsv1.ControllerRevision, error) {
	list, err := c.Kube.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []appsv1.ControllerRevision
	for _, cr := range list.Items {
		if o := metav1.GetControllerOf(&cr); o != nil && o.UID == owner {
			out = append(out, cr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out, nil
}

// Owner names an object a config object should be attached to.
type Owner struct {
	Kind string
	Name string
	UID  types.UID
}

func (o Owner) String() string { return o.Kind + " " + o.Name }

// OwnerOf names a Kubernetes object as an Owner.
func OwnerOf(kind string, obj metav1.Object) Owner {
	return Owner{Kind: kind, Name: obj.GetName(), UID: obj.GetUID()}
}

// WaitOwnedBy waits until the config object carries a well-formed reference to owner (controller:
// false, no blockOwnerDeletion), the only kind we write.
func (c *Cluster) WaitOwnedBy(ctx context.Context, timeout time.Duration, ns string, kind refs.Kind, name string, owner Owner) error {
	return Eventually(ctx, timeout, fmt.Sprintf("%s %s attached to %s", kind, name, owner), func(ctx context.Context) (bool, string, error) {
		owners, exists, err := c.Owners(ctx, ns, kind, name)
		if err != nil || !exists {
			return false, "object missing", err
		}
		for _, o := range owners {
			if o.UID != owner.UID {
				continue
			}
			if o.Kind != owner.Kind || o.Name != owner.Name || o.Controller == nil || *o.Controller || o.BlockOwnerDeletion != nil {
				return false, "", fmt.Errorf("the reference to %s is malformed: %+v", owner, o)
			}
			return true, "", nil
		}
		return false, "owners: " + describeOwners(owners), nil
	})
}

// Meta reads a config object's metadata: owners, finalizers, deletion.
func (c *Cluster) Meta(ctx context.Context, ns string, kind refs.Kind, name string) (*metav1.ObjectMeta, error) {
	switch kind {
	case refs.Secret:
		s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &s.ObjectMeta, nil
	default:
		cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &cm.ObjectMeta, nil
	}
}

// WaitProtected waits until the object carries the in-use protection finalizer.
func (c *Cluster) WaitProtected(ctx context.Context, timeout time.Duration, ns string, kind refs.Kind, name string) error {
	return Eventually(ctx, timeout, fmt.Sprintf("%s %s to carry %s", kind, name, api.InUseFinalizer), func(ctx context.Context) (bool, string, error) {
		m, err := c.Meta(ctx, ns, kind, name)
		if err != nil {
			return false, "", err
		}
		return api.HasFinalizer(m.Finalizers, api.InUseFinalizer), fmt.Sprintf("finalizers %v", m.Finalizers), nil
	})
}

// Held reports whether the object is being deleted and still exists: in-use protection holds it.
func (c *Cluster) Held(ctx context.Context, ns string, kind refs.Kind, name string) (bool, error) {
	m, err := c.Meta(ctx, ns, kind, name)
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("%s %s is gone", kind, name)
	}
	if err != nil {
		return false, err
	}
	return m.DeletionTimestamp != nil && api.HasFinalizer(m.Finalizers, api.InUseFinalizer), nil
}

// WaitHeld waits until the object is being deleted and held.
func (c *Cluster) WaitHeld(ctx context.Context, timeout time.Duration, ns string, kind refs.Kind, name string) error {
	return Eventually(ctx, timeout, fmt.Sprintf("%s %s deleted but held", kind, name), func(ctx context.Context) (bool, string, error) {
		held, err := c.Held(ctx, ns, kind, name)
		return held, "not held", err
	})
}

// Events returns the messages of the Events with this reason on a config object, oldest first.
func (c *Cluster) Events(ctx context.Context, ns string, kind refs.Kind, name, reason string) ([]string, error) {
	list, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == string(kind) && e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out, nil
}
