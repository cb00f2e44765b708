package render

import (
	"fmt"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// contentHash reads the content of a ConfigMap or Secret manifest and hashes it (package content:
// the one naming scheme). Reading is strict about what the API server would refuse.
func contentHash(kind refs.Kind, raw []byte) (string, error) {
	switch kind {
	case refs.ConfigMap:
		var cm content.ConfigMap
		if err := utiljson.Unmarshal(raw, &cm); err != nil {
			return "", fmt.Errorf("reading data and binaryData: %w (quote numbers and booleans: ConfigMap values are strings)", err)
		}
		return cm.Hash()
	case refs.Secret:
		var s struct {
			Type       string            `json:"type"`
			Data       map[string][]byte `json:"data"`
			StringData map[string]string `json:"stringData"`
		}
		if err := utiljson.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("reading type, data and stringData: %w (data values are base64, stringData values are strings)", err)
		}
		sec := content.Secret{Type: s.Type, Data: s.Data}
		for k, v := range s.StringData {
			if sec.Data == nil {
				sec.Data = map[string][]byte{}
			}
			sec.Data[k] = []byte(v)
		}
		return sec.Hash()
	}
	return "", fmt.Errorf("%s is not a config kind", kind)
}
