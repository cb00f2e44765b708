package framework

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binary is the real configmap-attacher executable, run as a user or a Job would run it.
type Binary struct {
	Path       string
	Kubeconfig string
}

// BuildBinary compiles cmd/configmap-attacher into a temporary directory; cleanup removes it.
func BuildBinary(ctx context.Context, repoRoot string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "configmap-attacher-bin")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	path = filepath.Join(dir, "configmap-attacher")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/configmap-attacher")
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build: %w\n%s", err, b)
	}
	return path, cleanup, nil
}

// Result is one finished run.
type Result struct {
	// Command is the executable's name in String: configmap-attacher when empty.
	Command  string
	Args     []string
	Stdout   string
	Stderr   string
	Code     int
	Duration time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("%s %s: exit %d after %s\nstdout:\n%s\nstderr:\n%s", cmp.Or(r.Command, "configmap-attacher"),
		strings.Join(r.Args, " "), r.Code, r.Duration.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// env is what a Job pod outside the cluster needs: the original tool's variables, pointed at our
// kubeconfig.
func (b Binary) env(extra []string) []string {
	env := append(os.Environ(), "IS_IN_CLUSTER=false", "KUBECONFIG="+b.Kubeconfig, "VERSION=e2e", "LOG_FORMAT=text")
	return append(env, extra...)
}

// Run runs the binary to completion; extraEnv entries are KEY=VALUE.
func (b Binary) Run(ctx context.Context, extraEnv []string, args ...string) Result {
	cmd := exec.CommandContext(ctx, b.Path, args...)
	cmd.Env = b.env(extraEnv)
	return runCaptured(cmd, "", args)
}

// runCaptured runs cmd (command with args) to completion and returns what it printed, its exit code
// (-1 when it could not run or was killed, the error appended to stderr) and how long it took.
func runCaptured(cmd *exec.Cmd, command string, args []string) Result {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := Result{Command: command, Args: args, Stdout: stdout.String(), Stderr: stderr.String(), Duration: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code = ee.ExitCode()
	} else if err != nil {
		r.Code, r.Stderr = -1, r.Stderr+err.Error()
	}
	return r
}

// Process is a long-running binary (the controller).
type Process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
	err  error
}

// Start starts the binary in the background; its output is kept for Logs.
func (b Binary) Start(ctx context.Context, extraEnv []string, args ...string) (*Process, error) {
	return startProcess(ctx, b.env(extraEnv), b.Path, args...)
}

// startProcess starts path in the background, in its own process group, with env; its output is kept
// for Logs, and it is stopped when ctx ends.
func startProcess(ctx context.Context, env []string, path string, args ...string) (*Process, error) {
	p := &Process{done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = (*lockedWriter)(p), (*lockedWriter)(p)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	go func() {
		select {
		case <-ctx.Done():
			p.Stop()
		case <-p.done:
		}
	}()
	return p, nil
}

type lockedWriter Process

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.Write(b)
}

// Logs returns everything the process printed so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM (graceful shutdown) and waits up to 10 s before killing.
func (p *Process) Stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// Kill ends the process at once, as a node failure would (no Lease release).
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitReady waits until the controller's /readyz answers 200 at the probe address it logged (as with
// -health-probe-bind-address=127.0.0.1:0): what a Service's endpoints, and so kube-apiserver's calls to
// the webhook, wait for in a cluster.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration) error {
	return Eventually(ctx, timeout, "the controller's /readyz", func(ctx context.Context) (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("the controller exited:\n%s", p.Logs())
		}
		addr := p.ServingAddress("probes")
		if addr == "" {
			return false, "no probe address logged yet", nil
		}
		return HTTPOK(ctx, "http://"+addr+"/readyz")
	})
}

// ServingAddress is the address of the controller's "serving" log line for server (metrics, probes,
// webhook), in text or JSON logs; empty until it is logged.
func (p *Process) ServingAddress(server string) string {
	re := regexp.MustCompile(`"server":"` + regexp.QuoteMeta(server) + `","address":"([^"]+)"|server=` + regexp.QuoteMeta(server) + ` address=(\S+)`)
	if m := re.FindStringSubmatch(p.Logs()); m != nil {
		return m[1] + m[2]
	}
	return ""
}
