package workload

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func notFound(err error, what string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("reading %s: %w", what, err)
}
