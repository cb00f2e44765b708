package manager

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/tools/leaderelection"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
)

// ErrLostLease ends the process: its controllers stopped because another replica may be leading now.
var ErrLostLease = errors.New("lost the leader Lease")

// runLeading runs run while this process holds the Lease, and returns only once run has returned: the
// elector starts OnStartedLeading in a goroutine and does not wait for it, so run is called here, on
// the caller's goroutine, once leadership is signalled. A process that returned earlier could exit while
// its workers still write after another replica took over. cfg's callbacks other than OnNewLeader are
// set here; leading is told when leadership starts and stops.
func runLeading(ctx context.Context, cfg leaderelection.LeaderElectionConfig, leading func(bool), run func(context.Context) error) error {
	electCtx, stopElecting := context.WithCancel(ctx)
	defer stopElecting()
	started := make(chan context.Context, 1)
	cfg.Callbacks.OnStartedLeading = func(leadCtx context.Context) { started <- leadCtx }
	cfg.Callbacks.OnStoppedLeading = func() {}
	if cfg.Callbacks.OnNewLeader == nil {
		cfg.Callbacks.OnNewLeader = func(string) {}
	}
	le, err := leaderelection.NewLeaderElector(cfg)
	if err != nil {
		return err
	}
	electing := make(chan struct{})
	go func() {
		defer close(electing)
		le.Run(electCtx)
	}()

	var runErr error
	select {
	case leadCtx := <-started:
		leading(true)
		logging.FromContext(ctx).Info("became leader", "lease", cfg.Name)
		runErr = run(leadCtx)
		leading(false)
		lost := leadCtx.Err() != nil && ctx.Err() == nil
		stopElecting() // run may have returned on its own error: give the Lease up
		<-electing     // the elector has released the Lease (ReleaseOnCancel)
		if runErr == nil && lost {
			runErr = fmt.Errorf("%w %s", ErrLostLease, cfg.Name)
		}
	case <-electing: // ctx ended while standing by
	}
	return runErr
}
