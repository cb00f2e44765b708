package testutil

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	sigsjson "sigs.k8s.io/json"
)

// StrictDecode decodes a manifest (JSON) into its typed object the way `kubectl apply` judges it
// before sending anything (its default --validate=strict, --dry-run=client): case-sensitive field
// names, no unknown field, no field twice, every value of the right type. known is false for a kind
// client-go does not know (a custom resource), whose schema only the cluster has.
func StrictDecode(raw []byte) (known bool, err error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return false, err
	}
	obj, err := scheme.Scheme.New(schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind))
	if err != nil {
		return false, nil
	}
	strict, err := sigsjson.UnmarshalStrict(raw, obj)
	if err != nil {
		return true, err
	}
	if len(strict) > 0 {
		return true, fmt.Errorf("%s %s: %v", tm.APIVersion, tm.Kind, strict)
	}
	return true, nil
}
