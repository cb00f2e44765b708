package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Pulumi is the pulumi CLI built by hack/tools/build.sh (with the YAML language host and the
// Kubernetes provider beside it), run on one Pulumi YAML project the way docs/pulumi.md says: offline,
// a local file backend, plugins found on PATH, nothing downloaded.
type Pulumi struct {
	// Bin is the directory holding pulumi, pulumi-language-yaml and pulumi-resource-kubernetes.
	Bin string
	// Dir is the project directory (Pulumi.yaml); the state (file backend) and PULUMI_HOME live under
	// it too, so a test's Pulumi never reads or writes the user's.
	Dir        string
	Kubeconfig string
	Stack      string
}

// The binaries of the pulumi tool (hack/tools/build.sh pulumi).
var pulumiBinaries = []string{"pulumi", "pulumi-language-yaml", "pulumi-resource-kubernetes"}

// PulumiPassphrase encrypts the stacks' secrets (the file backend's passphrase provider).
const PulumiPassphrase = "e2e-only"

// NewPulumi returns a Pulumi for a project in dir, or an error saying how to build the tool.
func NewPulumi(repoRoot, dir, kubeconfig string) (*Pulumi, error) {
	bin := filepath.Join(repoRoot, toolsBinDir)
	for _, b := range pulumiBinaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%s not built (run hack/tools/build.sh pulumi): %w", b, err)
		}
	}
	return &Pulumi{Bin: bin, Dir: dir, Kubeconfig: kubeconfig, Stack: "dev"}, nil
}

// Env is the environment of every pulumi command (docs/pulumi.md's recipe):
//   - PULUMI_BACKEND_URL: a file backend in the project directory (no Pulumi Cloud, no login);
//   - PULUMI_CONFIG_PASSPHRASE: the file backend's secrets provider asks for none interactively;
//   - PULUMI_SKIP_UPDATE_CHECK: no version check against the Pulumi service;
//   - PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: a plugin not found is an error, never a download;
//   - PATH starting with Bin: the language host and the provider are found there ("ambient" plugins;
//     PULUMI_IGNORE_AMBIENT_PLUGINS stays unset);
//   - PULUMI_HOME: a plugin cache of its own, which stays empty.
//
// And, for the tests only, HTTP_PROXY and HTTPS_PROXY naming a closed loopback port: any request to
// the internet fails at once and visibly instead of timing out (Go never proxies loopback addresses,
// so the API server at 127.0.0.1 is reached directly).
func (p *Pulumi) Env() []string {
	return []string{
		"PULUMI_BACKEND_URL=file://" + filepath.Join(p.Dir, ".state"),
		"PULUMI_CONFIG_PASSPHRASE=" + PulumiPassphrase,
		"PULUMI_SKIP_UPDATE_CHECK=true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true",
		"PULUMI_HOME=" + filepath.Join(p.Dir, ".pulumi-home"),
		"PATH=" + p.Bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "NO_PROXY=",
		"http_proxy=", "https_proxy=", "no_proxy=",
	}
}

// Run runs pulumi with args in the project directory until it exits or ctx ends (then it and its
// plugins are killed).
func (p *Pulumi) Run(ctx context.Context, args ...string) Result {
	cmd := exec.CommandContext(ctx, filepath.Join(p.Bin, "pulumi"), args...)
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), p.Env()...)
	// The plugins are pulumi's children: end the whole group when ctx ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return runCaptured(cmd, "pulumi", args)
}

// run runs pulumi and turns a non-zero exit into an error carrying its output.
func (p *Pulumi) run(ctx context.Context, args ...string) (Result, error) {
	r := p.Run(ctx, args...)
	if r.Code != 0 {
		return r, fmt.Errorf("%s", r)
	}
	return r, nil
}

// WriteProgram writes the project's Pulumi.yaml (a Pulumi YAML program: runtime yaml).
func (p *Pulumi) WriteProgram(program string) error {
	return os.WriteFile(filepath.Join(p.Dir, "Pulumi.yaml"), []byte(program), 0o644)
}

// Init writes the program and creates the stack, pointed at the cluster:
// `pulumi stack init`, `pulumi config set kubernetes:kubeconfig <path>`, then each config key=value.
func (p *Pulumi) Init(ctx context.Context, program string, config ...string) error {
	if err := os.MkdirAll(filepath.Join(p.Dir, ".state"), 0o755); err != nil {
		return err
	}
	if err := p.WriteProgram(program); err != nil {
		return err
	}
	if _, err := p.run(ctx, "stack", "init", p.Stack, "--non-interactive"); err != nil {
		return err
	}
	if _, err := p.run(ctx, "config", "set", "kubernetes:kubeconfig", p.Kubeconfig, "--stack", p.Stack); err != nil {
		return err
	}
	for _, kv := range config {
		k, v, _ := strings.Cut(kv, "=")
		if _, err := p.run(ctx, "config", "set", k, v, "--stack", p.Stack); err != nil {
			return err
		}
	}
	return nil
}

// Up runs `pulumi up --yes --non-interactive --skip-preview`, as a user applying a change does.
func (p *Pulumi) Up(ctx context.Context, args ...string) (Result, error) {
	return p.run(ctx, append([]string{"up", "--yes", "--non-interactive", "--skip-preview", "--color", "never", "--stack", p.Stack}, args...)...)
}

// Preview runs `pulumi preview --non-interactive --diff` (args: e.g. --expect-no-changes).
func (p *Pulumi) Preview(ctx context.Context, args ...string) (Result, error) {
	return p.run(ctx, append([]string{"preview", "--non-interactive", "--diff", "--color", "never", "--stack", p.Stack}, args...)...)
}

// Refresh runs `pulumi refresh --yes --non-interactive --skip-preview` (args: e.g. --expect-no-changes).
func (p *Pulumi) Refresh(ctx context.Context, args ...string) (Result, error) {
	return p.run(ctx, append([]string{"refresh", "--yes", "--non-interactive", "--skip-preview", "--color", "never", "--stack", p.Stack}, args...)...)
}

// Destroy runs `pulumi destroy --yes --non-interactive --skip-preview`.
func (p *Pulumi) Destroy(ctx context.Context, args ...string) (Result, error) {
	return p.run(ctx, append([]string{"destroy", "--yes", "--non-interactive", "--skip-preview", "--color", "never", "--stack", p.Stack}, args...)...)
}

// Output returns a stack output (`pulumi stack output <name>`).
func (p *Pulumi) Output(ctx context.Context, name string) (string, error) {
	r, err := p.run(ctx, "stack", "output", name, "--stack", p.Stack)
	return strings.TrimSpace(r.Stdout), err
}
