package workload

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// ClientSource reads straight from the API server, for one-shot commands.
type ClientSource struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

func (s ClientSource) Rollout(ctx context.Context, namespace, name string) (*RolloutObject, error) {
	u, err := s.Dynamic.Resource(RolloutGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return RolloutFromUnstructured(u)
}

func (s ClientSource) Deployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, error) {
	return s.Kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (s ClientSource) ReplicaSets(ctx context.Context, namespace string) ([]*appsv1.ReplicaSet, error) {
	list, err := s.Kube.AppsV1().ReplicaSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]*appsv1.ReplicaSet, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}
