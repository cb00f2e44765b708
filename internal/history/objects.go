package history

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Object is a config object as read from the API.
type Object struct {
	Ref  refs.Ref
	Meta metav1.ObjectMeta
	// Content is nil when only metadata was read: history needs no content, and reading none means
	// it never holds Secret values.
	Content *Content
	// LiveSnapshot is, for a pinned object, the name a snapshot of its content as it is now gets
	// (pinning.SnapshotName). History sets it from a read whose content is hashed and dropped, only for
	// the objects DriftRefs names; "" when not read.
	LiveSnapshot string
}

// Content is what a pod sees of a config object.
type Content struct {
	// Type is a Secret's type ("" for ConfigMaps).
	Type string
	// Data holds ConfigMap data and binaryData, and Secret data (decoded).
	Data map[string][]byte
	// Binary marks ConfigMap binaryData keys.
	Binary map[string]bool
}

// Objects are the config objects a history or a diff needs, by reference. An absent entry means the
// object does not exist.
type Objects map[refs.Ref]*Object

// Add records o.
func (objs Objects) Add(o *Object) { objs[o.Ref] = o }

// FromConfigMap converts a ConfigMap read with its content.
func FromConfigMap(cm *corev1.ConfigMap) *Object {
	c := &Content{Data: map[string][]byte{}, Binary: map[string]bool{}}
	for k, v := range cm.Data {
		c.Data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		c.Data[k] = v
		c.Binary[k] = true
	}
	return &Object{Ref: refs.Ref{Kind: refs.ConfigMap, Name: cm.Name}, Meta: cm.ObjectMeta, Content: c}
}

// FromSecret converts a Secret read with its content.
func FromSecret(s *corev1.Secret) *Object {
	c := &Content{Type: string(s.Type), Data: map[string][]byte{}}
	if c.Type == "" {
		c.Type = string(corev1.SecretTypeOpaque)
	}
	for k, v := range s.Data {
		c.Data[k] = v
	}
	// stringData is write-only on the server, but an object built by hand (tests, dry runs) may carry it.
	for k, v := range s.StringData {
		c.Data[k] = []byte(v)
	}
	return &Object{Ref: refs.Ref{Kind: refs.Secret, Name: s.Name}, Meta: s.ObjectMeta, Content: c}
}

// FromMetadata converts an object read through the metadata API.
func FromMetadata(kind refs.Kind, m *metav1.PartialObjectMetadata) *Object {
	return &Object{Ref: refs.Ref{Kind: kind, Name: m.Name}, Meta: m.ObjectMeta}
}

// AttachedTo reports whether the object carries an ownerReference to the revision with this uid, so
// the garbage collector keeps it while that revision lives.
func (o *Object) AttachedTo(uid types.UID) bool { return revision.OwnedBy(&o.Meta, uid) }

// Revisioned reports whether the object is opted in to revisions (our label).
func (o *Object) Revisioned() bool { return api.OptedIn(o.Meta.Labels) }

// Pinned reports whether the object carries the pin label: pods read their revision's snapshot of it.
func (o *Object) Pinned() bool { return api.Pinned(o.Meta.Labels) }

// IsSnapshot reports whether the object is one of our pinning snapshots.
func (o *Object) IsSnapshot() bool { return o.Meta.Labels[api.SnapshotLabel] == api.SnapshotValue }

// OriginalName is the name a config object had before it was given a revision name: the renderer's
// annotation when present, else the name without a trailing hash segment. o is nil for an object that
// does not exist.
func OriginalName(o *Object, name string) string {
	if o != nil {
		if orig := o.Meta.Annotations[api.OriginalNameAnnotation]; orig != "" {
			return orig
		}
	}
	return trimHash(name)
}

// trimHash removes a trailing "-<hash>" segment: the renderer's 10 hex digits, the original chart's
// adler32 in decimal, or any similar content hash. A segment counts as a hash when it is at least 6
// lower-case letters and digits with at least one digit, so names like demo-cm-v2 or app-config stay
// whole.
func trimHash(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return name
	}
	seg := name[i+1:]
	if len(seg) < 6 {
		return name
	}
	digit := false
	for _, r := range seg {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r >= 'a' && r <= 'z':
		default:
			return name
		}
	}
	if !digit {
		return name
	}
	return name[:i]
}
