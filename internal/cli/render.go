package cli

import (
	"context"
	"errors"
)

func runRender(_ context.Context, _ Env, _ []string) error {
	return errors.New("render: not implemented yet")
}
