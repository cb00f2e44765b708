package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// recorderEvents sends attach events through client-go's asynchronous, rate-limited recorder: a worker
// must not wait on an Event write between two attaches. (The Job, which exits right away, writes them
// synchronously instead.)
type recorderEvents struct {
	recorder record.EventRecorder
}

func newRecorderEvents(ctx context.Context, kc kubernetes.Interface) (*recorderEvents, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")})
	r := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: attach.FieldManager})
	return &recorderEvents{recorder: r}, b.Shutdown
}

func (e *recorderEvents) Attached(_ context.Context, obj *metav1.PartialObjectMetadata, kind refs.Kind, message string) {
	ref := &corev1.ObjectReference{
		APIVersion: "v1", Kind: string(kind), Namespace: obj.Namespace, Name: obj.Name,
		UID: obj.UID, ResourceVersion: obj.ResourceVersion,
	}
	e.recorder.Event(ref, corev1.EventTypeNormal, "Attached", message)
}
