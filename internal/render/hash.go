package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// HashLength is the number of hex digits of the content hash appended to a revisioned name: 40 bits,
// so two revisions of one object colliding is a one-in-a-trillion event, and the suffix stays short
// enough to read in kubectl output.
const HashLength = 10

// maxBaseLength keeps <base>-<hash> within the 253 characters of a DNS subdomain name.
const maxBaseLength = validation.DNS1123SubdomainMaxLength - 1 - HashLength

// configMapContent is what a pod sees of a ConfigMap.
type configMapContent struct {
	Data       map[string]string `json:"data,omitempty"`
	BinaryData map[string][]byte `json:"binaryData,omitempty"`
}

// secretContent is a Secret as the API server stores it: stringData merged into data (stringData
// wins, as on the server), the type defaulted to Opaque. Writing the same Secret with stringData or
// with base64 data therefore gives the same name.
type secretContent struct {
	Type string            `json:"type"`
	Data map[string][]byte `json:"data,omitempty"`
}

// contentHash returns the first HashLength hex digits of the SHA-256 of the object's content in
// canonical JSON (encoding/json sorts map keys and base64-encodes bytes), so equal content gives the
// same hash on any machine whatever the key order or YAML style of the input. Metadata is not hashed:
// labels and annotations do not reach the pod, and the renderer adds some of its own.
//
// json.Marshal's HTML escaping (< > & as \u003c \u003e \u0026) is part of the scheme: Helm's
// `toJson | sha256sum | trunc 10` computes the same hash, which is how a chart can name revisions
// itself and pass through this renderer unchanged (charts/base-app does).
func contentHash(kind refs.Kind, raw []byte) (string, error) {
	var canonical any
	switch kind {
	case refs.ConfigMap:
		var cm configMapContent
		if err := utiljson.Unmarshal(raw, &cm); err != nil {
			return "", fmt.Errorf("reading data and binaryData: %w (quote numbers and booleans: ConfigMap values are strings)", err)
		}
		nonNil(cm.BinaryData)
		canonical = cm
	case refs.Secret:
		var s struct {
			Type       string            `json:"type"`
			Data       map[string][]byte `json:"data"`
			StringData map[string]string `json:"stringData"`
		}
		if err := utiljson.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("reading type, data and stringData: %w (data values are base64, stringData values are strings)", err)
		}
		c := secretContent{Type: s.Type, Data: s.Data}
		if c.Type == "" {
			c.Type = "Opaque"
		}
		for k, v := range s.StringData {
			if c.Data == nil {
				c.Data = map[string][]byte{}
			}
			c.Data[k] = []byte(v)
		}
		nonNil(c.Data)
		canonical = c
	default:
		return "", fmt.Errorf("%s is not a config kind", kind)
	}
	b, err := json.Marshal(canonical)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:HashLength], nil
}

// nonNil makes `key: null` hash like `key: ""`: the API server stores both as empty.
func nonNil(m map[string][]byte) {
	for k, v := range m {
		if v == nil {
			m[k] = []byte{}
		}
	}
}

// revisionName is <base>-<hash>; a base too long for that is truncated (never the hash, which is
// what makes the name unique) and trimmed of trailing dots and dashes to stay a valid name.
func revisionName(base, hash string) string {
	return truncateBase(base) + "-" + hash
}

func truncateBase(base string) string {
	if len(base) <= maxBaseLength {
		return base
	}
	return strings.TrimRight(base[:maxBaseLength], "-.")
}

// isRevisionOf reports whether name is base with some content hash appended, i.e. an earlier
// rendering of base.
func isRevisionOf(name, base string) bool {
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
