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
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
)

// EventSink records that an object was attached; a failure there never fails an attach. The Job mode
// and the controller differ only in how they deliver events: SyncEvents and RecorderEvents.
type EventSink interface {
	Attached(ctx context.Context, obj Object, message string)
}

// Reason is the Event reason of an attach.
const Reason = "Attached"

func involved(obj Object) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: "v1", Kind: string(obj.Kind), Namespace: obj.Meta.Namespace, Name: obj.Meta.Name,
		UID: obj.Meta.UID, ResourceVersion: obj.Meta.ResourceVersion,
	}
}

// SyncEvents writes one core/v1 Event per attach, synchronously: a Job exits right after attaching, and
// an asynchronous recorder would drop its last events. Events are best effort: without RBAC for them we
// warn once and carry on, because the original tool's RBAC (which users keep) does not grant them.
type SyncEvents struct {
	Client   kubernetes.Interface
	Instance string // reportingInstance: pod or host name

	mu       sync.Mutex
	disabled bool
}

// Attached implements EventSink.
func (e *SyncEvents) Attached(ctx context.Context, obj Object, message string) {
	e.mu.Lock()
	disabled := e.disabled
	e.mu.Unlock()
	if disabled {
		return
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", obj.Meta.Name, now.UnixNano()), Namespace: obj.Meta.Namespace},
		InvolvedObject:      *involved(obj),
		Reason:              Reason,
		Message:             message,
		Type:                corev1.EventTypeNormal,
		Source:              corev1.EventSource{Component: api.FieldManager},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "configmap-attacher.io/attacher",
		ReportingInstance:   e.Instance,
	}
	_, err := e.Client.CoreV1().Events(obj.Meta.Namespace).Create(ctx, ev, metav1.CreateOptions{})
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
	log.Warn("recording event failed", "object", obj.Meta.Name, "err", err)
}

// RecorderEvents sends events through client-go's asynchronous, rate-limited recorder: a controller
// worker must not wait on an Event write between two attaches.
type RecorderEvents struct {
	Recorder record.EventRecorder
}

// NewRecorderEvents starts a broadcaster writing to the API; stop flushes and ends it.
func NewRecorderEvents(ctx context.Context, kc kubernetes.Interface) (events *RecorderEvents, stop func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")})
	return &RecorderEvents{Recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: api.FieldManager})}, b.Shutdown
}

// Attached implements EventSink.
func (e *RecorderEvents) Attached(_ context.Context, obj Object, message string) {
	e.Recorder.Event(involved(obj), corev1.EventTypeNormal, Reason, message)
}
