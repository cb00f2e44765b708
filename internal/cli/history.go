package cli

import (
	"context"
	"errors"
)

func runHistory(_ context.Context, _ Env, _ []string) error {
	return errors.New("history: not implemented yet")
}
