package cli

import (
	"context"
	"errors"
)

func runController(_ context.Context, _ Env, _ []string) error {
	return errors.New("controller: not implemented yet")
}
