// Package cli maps the command line onto the packages that do the work: it parses flags into each
// mode's options, sets up logging and clients, and turns errors into exit codes.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/configmap-attacher/configmap-attacher/internal/helmplugin"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/version"
)

// Exit codes, as documented in the README.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Env is everything the program takes from its process, passed in so tests can run it in-process.
type Env struct {
	Args   []string // without the program name
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Lookup func(key string) (string, bool)

	// flagSet, when set, is handed every command's flag set as it is made (Reference reads them).
	flagSet func(*flag.FlagSet)
}

// OSEnv is the real process environment. Run by Helm 4 as its post-renderer plugin, whose stderr
// Helm never shows, what the binary writes to stderr also goes to Helm's own (see helmplugin), and
// logs default to warnings and errors as text: what a user of helm should see on the terminal.
func OSEnv() Env {
	env := Env{Args: os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Lookup: os.LookupEnv}
	if _, ok := helmplugin.Dir(os.LookupEnv); ok {
		if w := helmplugin.HelmStderr(); w != nil {
			env.Stderr = io.MultiWriter(os.Stderr, w)
		}
		env.Lookup = func(key string) (string, bool) {
			if v, ok := os.LookupEnv(key); ok {
				return v, ok
			}
			switch key {
			case "LOG_LEVEL":
				return "warn", true
			case "LOG_FORMAT":
				return "text", true
			}
			return "", false
		}
	}
	return env
}

// usageError marks bad input on the command line (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usage(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// command is one sub-command. Each lives in its own file.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env Env, args []string) error
}

func commands() []command {
	return []command{
		{"attach", "attach named ConfigMaps/Secrets to a workload's current ReplicaSet once (Job mode; the default)", runJob},
		{"controller", "keep every opted-in ConfigMap/Secret attached to every ReplicaSet that uses it", runController},
		{"render", "give opted-in ConfigMaps/Secrets content-hash names and rewrite references (Helm post-renderer)", runRender},
		{"adopt", "prepare a workload deployed without render for its first upgrade with it (keep, opt in, attach)", runAdopt},
		{"release", "take the in-use protection finalizer off every object (uninstall)", runRelease},
		{"history", "list a workload's revisions and the config each one runs with", runHistory},
		{"diff", "show what changed in the config between two revisions", runDiff},
		{"version", "print the version", runVersion},
	}
}

// Main runs the program and returns its exit code.
func Main(ctx context.Context, env Env) int {
	args := env.Args
	if dir, ok := helmplugin.Dir(env.Lookup); ok {
		if code, done := checkHelmPlugin(env, dir); done {
			return code
		}
	}
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, topUsage())
		return ExitUsage
	}
	name := "attach"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if name == "help" {
		fmt.Fprint(env.Stdout, topUsage())
		return ExitOK
	}
	var cmd *command
	for _, c := range commands() {
		if c.name == name {
			cmd = &c
			break
		}
	}
	if cmd == nil {
		fmt.Fprintf(env.Stderr, "configmap-attacher: unknown command %q\n\n%s", name, topUsage())
		return ExitUsage
	}
	err := cmd.run(ctx, env, args)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, new(usageError)):
		fmt.Fprintf(env.Stderr, "configmap-attacher %s: %v\nRun 'configmap-attacher %s -h' for usage.\n", cmd.name, err, cmd.name)
		return ExitUsage
	default:
		fmt.Fprintf(env.Stderr, "configmap-attacher %s: error: %v\n", cmd.name, err)
		return ExitFailure
	}
}

// checkHelmPlugin refuses, in one line, what the binary must not do as Helm 4's post-renderer
// plugin: run from a plugin of another version, or run anything but render (a missing
// `--post-renderer-args render` would otherwise start the Job mode) and version (the plugin's install
// hook). done reports that Main must return code.
func checkHelmPlugin(env Env, dir string) (code int, done bool) {
	if err := helmplugin.CheckVersion(dir, version.Get()); err != nil {
		fmt.Fprintf(env.Stderr, "configmap-attacher: %v\n", err)
		return ExitFailure, true
	}
	if len(env.Args) == 0 || (env.Args[0] != "render" && env.Args[0] != "version") {
		got := "none"
		if len(env.Args) > 0 {
			got = fmt.Sprintf("%q", env.Args[0])
		}
		fmt.Fprintf(env.Stderr, "configmap-attacher: as a Helm post-renderer its first argument must be render "+
			"(--post-renderer %s --post-renderer-args render ...), got %s\n", helmplugin.Name, got)
		return ExitUsage, true
	}
	return 0, false
}

func topUsage() string {
	var b strings.Builder
	b.WriteString(`configmap-attacher gives ConfigMaps and Secrets revisions that follow workload revisions: each
revisioned config object gets an ownerReference to every ReplicaSet whose pod template uses it, so the
garbage collector deletes old config exactly when the Rollout or Deployment prunes the old ReplicaSet.

Usage:
  configmap-attacher -rollout NAME -namespace NS -configmaps a,b [flags]   (Job mode, as the original tool)
  configmap-attacher <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-11s %s\n", c.name, c.summary)
	}
	b.WriteString(`
Run 'configmap-attacher <command> -h' for a command's flags.
`)
	return b.String()
}

// newFlagSet returns a flag set that reports errors instead of exiting; -h prints the synopsis and flags.
func newFlagSet(env Env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if env.flagSet != nil {
		env.flagSet(fs)
	}
	// Errors come back from Parse as one line; usage is printed only when asked for, to stdout.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(env.Stdout, synopsis)
		fmt.Fprintln(env.Stdout, "\nFlags (-flag and --flag are the same):")
		fs.SetOutput(env.Stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses args, maps flag errors to usage errors and refuses stray positional arguments unless
// allowed.
func parse(fs *flag.FlagSet, args []string, allowArgs bool) error {
	// The flag package calls Usage on every parse error; we want it for -h only (stdout may be a
	// post-renderer's manifests), and a one-line error otherwise.
	printUsage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = printUsage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage()
			return err
		}
		return usageError{err}
	}
	if !allowArgs && fs.NArg() > 0 {
		return usage("unexpected argument %q (flags must come before it, or is a comma list split by spaces?)", fs.Arg(0))
	}
	return nil
}

// setupLogging builds the logger from LOG_LEVEL, routes client-go's klog output through it, and logs
// the audit line the original tool's VERSION variable was for, at startLevel: info for the modes that
// change the cluster, debug for read-only commands whose stderr a person reads.
func setupLogging(ctx context.Context, env Env, command string, startLevel slog.Level) (context.Context, error) {
	lvlName, _ := env.Lookup("LOG_LEVEL")
	lvl, err := logging.ParseLevel(lvlName)
	if err != nil {
		return nil, usageError{err}
	}
	fmtName, _ := env.Lookup("LOG_FORMAT")
	format, err := logging.ParseFormat(fmtName)
	if err != nil {
		return nil, usageError{err}
	}
	log := logging.New(env.Stderr, lvl, format)
	klog.SetSlogLogger(log.With("source", "client-go"))
	userVersion, ok := env.Lookup("VERSION")
	if !ok || userVersion == "" {
		userVersion = "(unset)"
	}
	log.Log(ctx, startLevel, "configmap-attacher starting", "command", command, "version", userVersion, "build", version.Get())
	return logging.NewContext(ctx, log), nil
}

// connect sets up logging (see setupLogging) and builds clients from the client options and
// IS_IN_CLUSTER: the common start of every command that talks to a cluster.
func connect(ctx context.Context, env Env, command string, startLevel slog.Level, o *kube.ClientOptions) (context.Context, *kube.Clients, error) {
	ctx, err := setupLogging(ctx, env, command, startLevel)
	if err != nil {
		return nil, nil, err
	}
	if err := o.LoadEnv(env.Lookup); err != nil {
		return nil, nil, usageError{err}
	}
	o.UserAgent = "configmap-attacher/" + version.Get()
	cfg, err := o.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	clients, err := kube.NewClients(cfg)
	return ctx, clients, err
}

func runVersion(_ context.Context, env Env, _ []string) error {
	fmt.Fprintln(env.Stdout, version.Get())
	return nil
}
