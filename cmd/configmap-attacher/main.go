// Command configmap-attacher gives Kubernetes ConfigMaps and Secrets revisions that follow ReplicaSets.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/configmap-attacher/configmap-attacher/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.OSEnv())
	stop()
	os.Exit(code)
}
