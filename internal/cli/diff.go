package cli

import (
	"context"
	"errors"
)

func runDiff(_ context.Context, _ Env, _ []string) error {
	return errors.New("diff: not implemented yet")
}
