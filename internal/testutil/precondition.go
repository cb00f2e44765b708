package testutil

import (
	"encoding/json"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

// VersionPrecondition is a PATCH reactor doing what the client-go fakes do not: refuse, as a conflict,
// a patch carrying a metadata.resourceVersion other than current (the object's version on the API
// server). A patch without one is unconditional and goes on to the fake's own handling.
func VersionPrecondition(current string) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		p, ok := a.(k8stesting.PatchAction)
		if !ok {
			return false, nil, nil
		}
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			return true, nil, err
		}
		if rv := body.Metadata.ResourceVersion; rv != "" && rv != current {
			gr := schema.GroupResource{Group: p.GetResource().Group, Resource: p.GetResource().Resource}
			return true, nil, apierrors.NewConflict(gr, p.GetName(), errors.New("the object has been modified"))
		}
		return false, nil, nil
	}
}
