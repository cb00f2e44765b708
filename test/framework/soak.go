package framework

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Helpers for long runs (test/soak): a controller whose logs go to a file rather than memory, how it
// ended, and keeping a local cluster's components running.

// StartLogged starts the binary in the background like Start, but appends its output to logPath
// (after a header line naming the start), so hours of logs and several restarts of one replica stay
// in one file and out of memory. Logs() of such a process is empty: read the file.
func (b Binary) StartLogged(ctx context.Context, extraEnv []string, logPath, header string, args ...string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "--- %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), header)
	p := &Process{done: make(chan struct{})}
	p.cmd = exec.Command(b.Path, args...)
	p.cmd.Env = b.env(extraEnv)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.done) }()
	go func() {
		select {
		case <-ctx.Done():
			p.Stop()
		case <-p.done:
		}
	}()
	return p, nil
}

// ExitErr is how the process ended (nil for exit 0), once it has; nil while it runs.
func (p *Process) ExitErr() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// DeadComponents names the processes of a cluster we started that are not running: the control
// plane kwokctl started (its pid files) and the Argo Rollouts controller. A long run outlives some of
// them (kube-scheduler exits when it finds its cache inconsistent, or loses its Lease to an API
// server outage); a real cluster's kubelet would restart them.
func (c *Cluster) DeadComponents() ([]string, error) {
	if !c.owned {
		return nil, nil
	}
	dir := filepath.Dir(c.Kubeconfig)
	files, err := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	if err != nil {
		return nil, err
	}
	files = append(files, filepath.Join(dir, "rollouts-controller.pid"))
	var dead []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || syscall.Kill(pid, 0) != nil {
			dead = append(dead, strings.TrimSuffix(filepath.Base(f), ".pid"))
		}
	}
	return dead, nil
}

// RestartComponents starts whatever component of a cluster we started has stopped (hack/cluster/up.sh
// is idempotent and restarts dead components).
func (c *Cluster) RestartComponents(ctx context.Context, progress io.Writer) error {
	if !c.owned {
		return fmt.Errorf("restarting components needs a cluster we started")
	}
	return c.up(ctx, progress)
}
