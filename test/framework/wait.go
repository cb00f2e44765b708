package framework

import (
	"context"
	"fmt"
	"net/http"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Eventually polls cond every 100 ms until it holds or timeout passes. cond returns a description of
// what it saw, so a timeout says what the cluster looked like, not just "condition not met".
func Eventually(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var seen string
	for {
		ok, s, err := cond(ctx)
		if err != nil {
			if ctx.Err() == nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			// The wait's own deadline ended the call: what it answered says nothing (a GET cut short
			// is not an object gone).
			return fmt.Errorf("timed out after %s waiting for %s; last seen: %s", timeout, what, seen)
		}
		if ok {
			return nil
		}
		seen = s
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s; last seen: %s", timeout, what, seen)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Owners returns a config object's ownerReferences; exists is false once it is gone.
func (c *Cluster) Owners(ctx context.Context, ns string, kind refs.Kind, name string) (owners []metav1.OwnerReference, exists bool, err error) {
	var meta metav1.Object
	switch kind {
	case refs.Secret:
		meta, err = c.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	default:
		meta, err = c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return meta.GetOwnerReferences(), true, nil
}

// CheckAttached verifies the object carries exactly the reference our rules allow to rs.
func CheckAttached(owners []metav1.OwnerReference, rs *appsv1.ReplicaSet) error {
	want := revision.FromReplicaSet(rs).OwnerReference()
	for _, o := range owners {
		if o.UID != rs.UID {
			continue
		}
		if o.APIVersion != want.APIVersion || o.Kind != want.Kind || o.Name != want.Name ||
			o.Controller == nil || *o.Controller || o.BlockOwnerDeletion != nil {
			return fmt.Errorf("ownerReference to %s is malformed: %+v", rs.Name, o)
		}
		return nil
	}
	return fmt.Errorf("no ownerReference to ReplicaSet %s (uid %s); owners: %s", rs.Name, rs.UID, describeOwners(owners))
}

func describeOwners(owners []metav1.OwnerReference) string {
	if len(owners) == 0 {
		return "none"
	}
	s := ""
	for i, o := range owners {
		if i > 0 {
			s += ", "
		}
		s += o.Kind + "/" + o.Name
	}
	return s
}

// WaitAttached waits until the object is owned by rs (the controller works asynchronously).
func (c *Cluster) WaitAttached(ctx context.Context, timeout time.Duration, ns string, kind refs.Kind, name string, rs *appsv1.ReplicaSet) error {
	return Eventually(ctx, timeout, fmt.Sprintf("%s %s attached to ReplicaSet %s", kind, name, rs.Name), func(ctx context.Context) (bool, string, error) {
		owners, exists, err := c.Owners(ctx, ns, kind, name)
		if err != nil || !exists {
			return false, "object missing", err
		}
		if err := CheckAttached(owners, rs); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

// WaitGone waits until the garbage collector (or anyone) deleted the object.
func (c *Cluster) WaitGone(ctx context.Context, timeout time.Duration, ns string, kind refs.Kind, name string) error {
	return Eventually(ctx, timeout, fmt.Sprintf("%s %s to be garbage collected", kind, name), func(ctx context.Context) (bool, string, error) {
		owners, exists, err := c.Owners(ctx, ns, kind, name)
		return err == nil && !exists, "still there, owners: " + describeOwners(owners), err
	})
}

// PodsOf lists the live pods a ReplicaSet controls.
func (c *Cluster) PodsOf(ctx context.Context, rs *appsv1.ReplicaSet) ([]corev1.Pod, error) {
	list, err := c.Kube.CoreV1().Pods(rs.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && metav1.IsControlledBy(&p, rs) {
			out = append(out, p)
		}
	}
	return out, nil
}

// ReadyPods counts the pods whose Ready condition is true.
func ReadyPods(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// WaitPods waits until rs has exactly n ready pods and no others.
func (c *Cluster) WaitPods(ctx context.Context, timeout time.Duration, rs *appsv1.ReplicaSet, n int) error {
	return Eventually(ctx, timeout, fmt.Sprintf("ReplicaSet %s to run %d ready pods", rs.Name, n), func(ctx context.Context) (bool, string, error) {
		pods, err := c.PodsOf(ctx, rs)
		if err != nil {
			return false, "", err
		}
		r := ReadyPods(pods)
		return r == n && len(pods) == n, fmt.Sprintf("%d pods, %d ready", len(pods), r), nil
	})
}

// WaitReplicaSetGone waits until a ReplicaSet is deleted (revisionHistoryLimit pruning).
func (c *Cluster) WaitReplicaSetGone(ctx context.Context, timeout time.Duration, ns, name string) error {
	return Eventually(ctx, timeout, "ReplicaSet "+name+" to be deleted", func(ctx context.Context) (bool, string, error) {
		_, err := c.Kube.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
}

// HTTPOK is a condition for Eventually: GET url answers 200 (a refused connection is not yet).
func HTTPOK(ctx context.Context, url string) (bool, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error(), nil
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, "GET " + url + ": " + resp.Status, nil
}
