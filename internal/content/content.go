// Package content names a config revision after what a pod sees of it: <name>-<hash>, the hash taken
// over the data in a canonical form, so the same content gets the same name anywhere — from a manifest
// (render), from a chart's own template helper (charts/base-app), or from a live object (a pinning
// snapshot).
package content

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
)

// HashLength is the number of hex digits of the content hash appended to a revisioned name: 40 bits,
// so two revisions of one object colliding is a one-in-a-trillion event, and the suffix stays short
// enough to read in kubectl output.
const HashLength = 10

// maxBaseLength keeps <base>-<hash> within the 253 characters of a DNS subdomain name.
const maxBaseLength = validation.DNS1123SubdomainMaxLength - 1 - HashLength

// ConfigMap is what a pod sees of a ConfigMap.
type ConfigMap struct {
	Data       map[string]string `json:"data,omitempty"`
	BinaryData map[string][]byte `json:"binaryData,omitempty"`
}

// Secret is a Secret as the API server stores it: stringData merged into data (stringData wins, as on
// the server), the type defaulted to Opaque. Writing the same Secret with stringData or with base64
// data therefore gives the same name.
type Secret struct {
	Type string            `json:"type"`
	Data map[string][]byte `json:"data,omitempty"`
}

// Hash returns the first HashLength hex digits of the SHA-256 of the content in canonical JSON
// (encoding/json sorts map keys and base64-encodes bytes), so equal content gives the same hash on any
// machine whatever the key order or YAML style it came in. Metadata is not hashed: labels and
// annotations do not reach the pod.
//
// json.Marshal's HTML escaping (< > & as \u003c \u003e \u0026) is part of the scheme: Helm's
// `toJson | sha256sum | trunc 10` computes the same hash, which is how a chart can name revisions
// itself and pass through the renderer unchanged (charts/base-app does).
func (c ConfigMap) Hash() (string, error) {
	c.BinaryData = nonNil(c.BinaryData)
	return hash(c)
}

// Hash is ConfigMap.Hash for a Secret.
func (s Secret) Hash() (string, error) {
	if s.Type == "" {
		s.Type = "Opaque"
	}
	s.Data = nonNil(s.Data)
	return hash(s)
}

// HashJSON is the content hash of any value: the first HashLength hex digits of the SHA-256 of its
// canonical JSON. ConfigMap.Hash and Secret.Hash are this over what a pod sees; the config trigger
// hashes the set of them a pod template reads with it.
func HashJSON(v any) (string, error) { return hash(v) }

// Of is the content hash of a live ConfigMap or Secret.
func Of(obj runtime.Object) (string, error) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return ConfigMap{Data: o.Data, BinaryData: o.BinaryData}.Hash()
	case *corev1.Secret:
		return Secret{Type: string(o.Type), Data: o.Data}.Hash()
	}
	return "", fmt.Errorf("%T is not a ConfigMap or Secret", obj)
}

// OfKeys is the content hash of what a pod reads of a live ConfigMap or Secret through the given keys
// only (a configMapKeyRef, a volume's items): the hash of the same canonical form over those keys,
// a key the object lacks left out. Nil keys: the whole object, as Of.
func OfKeys(obj runtime.Object, keys []string) (string, error) {
	v, err := Read(obj, keys, false)
	if err != nil {
		return "", err
	}
	return hash(v)
}

// Read is what a pod reads of a live ConfigMap or Secret through keys (nil: all of it), in the
// canonical form the hashes are taken over (HashJSON of it is OfKeys). dataOnly leaves a ConfigMap's
// binaryData out: env and envFrom read .data only.
func Read(obj runtime.Object, keys []string, dataOnly bool) (any, error) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		c := ConfigMap{Data: o.Data, BinaryData: o.BinaryData}
		if keys != nil {
			c = ConfigMap{Data: only(o.Data, keys), BinaryData: only(o.BinaryData, keys)}
		}
		if dataOnly {
			c.BinaryData = nil
		}
		c.BinaryData = nonNil(c.BinaryData)
		return c, nil
	case *corev1.Secret:
		s := Secret{Type: string(o.Type), Data: o.Data}
		if keys != nil {
			s.Data = only(o.Data, keys)
		}
		if s.Type == "" {
			s.Type = "Opaque"
		}
		s.Data = nonNil(s.Data)
		return s, nil
	}
	return nil, fmt.Errorf("%T is not a ConfigMap or Secret", obj)
}

// KeyedHash is HashJSON keyed: the first HashLength hex digits of the HMAC-SHA256 under key of v's
// canonical JSON. Without the key nobody can check a guess of v against it.
func KeyedHash(key []byte, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))[:HashLength], nil
}

// only keeps the given keys of m (nil when none of them is there).
func only[V any](m map[string]V, keys []string) map[string]V {
	var out map[string]V
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = map[string]V{}
			}
			out[k] = v
		}
	}
	return out
}

// HashOfName is the content hash a revisioned name <base>-<hash> carries.
func HashOfName(name, base string) (string, bool) {
	if !IsRevisionOf(name, base) {
		return "", false
	}
	return name[len(name)-HashLength:], true
}

func hash(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:HashLength], nil
}

// nonNil makes `key: null` hash like `key: ""`: the API server stores both as empty.
func nonNil(m map[string][]byte) map[string][]byte {
	if m == nil {
		return nil
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		if v == nil {
			v = []byte{}
		}
		out[k] = v
	}
	return out
}

// Name is <base>-<hash>; a base too long for that is truncated (never the hash, which is what makes
// the name unique) and trimmed of trailing dots and dashes to stay a valid name.
func Name(base, hash string) string {
	return truncateBase(base) + "-" + hash
}

func truncateBase(base string) string {
	if len(base) <= maxBaseLength {
		return base
	}
	return strings.TrimRight(base[:maxBaseLength], "-.")
}

// IsRevisionOf reports whether name is base with some content hash appended.
func IsRevisionOf(name, base string) bool {
	rest, ok := strings.CutPrefix(name, truncateBase(base)+"-")
	if !ok || len(rest) != HashLength {
		return false
	}
	for _, r := range rest {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}
