package attach

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// APIEvents writes one core/v1 Event per attach, synchronously: a Job exits right after attaching, and
// an asynchronous recorder would drop its last events. Events are best effort: without RBAC for them we
// warn once and carry on, because the original tool's RBAC (which users keep) does not grant them.
type APIEvents struct {
	Client   kubernetes.Interface
	Instance string // reportingInstance: pod or host name

	mu       sync.Mutex
	disabled bool
}

// Attached implements EventSink.
func (e *APIEvents) Attached(ctx context.Context, obj *metav1.PartialObjectMetadata, kind refs.Kind, message string) {
	e.mu.Lock()
	disabled := e.disabled
	e.mu.Unlock()
	if disabled {
		return
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", obj.Name, now.UnixNano()),
			Namespace: obj.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: string(kind), Namespace: obj.Namespace, Name: obj.Name,
			UID: obj.UID, ResourceVersion: obj.ResourceVersion,
		},
		Reason:              "Attached",
		Message:             message,
		Type:                corev1.EventTypeNormal,
		Source:              corev1.EventSource{Component: FieldManager},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "configmap-attacher.io/attacher",
		ReportingInstance:   e.Instance,
	}
	_, err := e.Client.CoreV1().Events(obj.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err == nil {
		return
	}
	log := logging.FromContext(ctx)
	if apierrors.IsForbidden(err) { // it will stay forbidden for this run
		e.mu.Lock()
		e.disabled = true
		e.mu.Unlock()
		log.Warn("cannot record events; grant create on events to see attachments in kubectl describe", "err", err)
		return
	}
	log.Warn("recording event failed", "object", obj.Name, "err", err)
}
