package cli

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/configmap-attacher/configmap-attacher/internal/history/load"
	"github.com/configmap-attacher/configmap-attacher/internal/history/printer"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

const historySynopsis = `List a Rollout's or a Deployment's revisions (its ReplicaSets, newest first) and the ConfigMaps and
Secrets each one runs with: the config a rollback to that revision gets.

  ROLE    stable, canary or old for a Rollout, as its status says (a blue-green preview shows as
          canary); current or old for a Deployment
  PODS    ready/desired
  CONFIG  every ConfigMap and Secret the revision's pod template references (as kubectl names
          them), marked when something needs attention:
            (MISSING)            it does not exist: that revision's pods cannot start (a warning
                                 under the table says what that means for the revision)
            (missing, optional)  it does not exist, but is referenced as optional
            (not attached)       opted in, but no ownerReference to that ReplicaSet: its lifetime
                                 is not tied to the revision (run the attacher)
            (not revisioned)     a plain shared object: a change to it reaches every revision
            -> NAME (pinned)     zero-touch pinning: the revision's pods read its snapshot NAME
            (not pinned yet)     labelled for pinning, but the revision owns no snapshot: its pods
                                 read the object as it is now
          A DRIFT line under the table names a pinned object changed in place since the current
          revision was created: no pod reads that content until the pod template changes.
Only metadata is read: no Secret value. To tell drift, the pinned objects the current revision reads
through a snapshot are read whole and hashed, never printed.

Usage:
  configmap-attacher history KIND/NAME [-n NAMESPACE] [-o table|json|yaml] [flags]
  kubectl configmap-revisions history KIND/NAME [-n NAMESPACE] [-o ...]   (installed as a kubectl plugin)

KIND is rollout (ro) or deployment (deploy). Flags may come before or after KIND/NAME. The namespace
defaults to the kubeconfig context's, as for kubectl.

Examples:
  configmap-attacher history rollout/demo -n devops-apps-01
  configmap-attacher history deployment/web -o json | jq -r '.revisions[] | select(.role=="current") | .config[].name'
  configmap-attacher diff rollout/demo 3 4      (what changed between two of these revisions)

Environment:
  IS_IN_CLUSTER  unset: kubeconfig like kubectl (in a pod: its service account); false: kubeconfig
  LOG_LEVEL      debug, info (default), warn, error: logs go to stderr, output to stdout
  NO_COLOR       set: no colors (colors are only ever used when stdout is a terminal)

Exit codes: 0 listed, 1 failed (unknown workload or kind, API error), 2 bad usage.

See docs/history.md.
`

// readFlags are the flags of the read-only commands: kubectl's spellings, so they work as a plugin.
type readFlags struct {
	client    kube.ClientOptions
	namespace string
}

func (f *readFlags) addFlags(fs *flag.FlagSet) {
	f.client.AddFlags(fs)
	fs.StringVar(&f.namespace, "namespace", "", "namespace of the workload (default: the kubeconfig context's namespace)")
	fs.StringVar(&f.namespace, "n", "", "shorthand for -namespace")
}

// workloadRef parses KIND/NAME: a malformed argument is bad usage (exit 2), a well-formed one naming
// a kind we do not follow is an unknown kind (exit 1), as kubectl treats an unknown resource type.
func workloadRef(namespace, arg string) (workload.Ref, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok || kind == "" || name == "" {
		return workload.Ref{}, usage("workload %q must be written KIND/NAME, e.g. rollout/demo or deployment/web", arg)
	}
	return workload.ParseRef(namespace, arg)
}

// resolve checks the KIND/NAME argument (a malformed one is bad usage before any connection), sets up
// logging and clients, settles the namespace like kubectl, and reads the workload with its ReplicaSets.
func (f *readFlags) resolve(ctx context.Context, env Env, command, arg string) (context.Context, *kube.Clients, *workload.Resolved, error) {
	if _, err := workloadRef("", arg); err != nil {
		return nil, nil, nil, err
	}
	ctx, clients, err := connect(ctx, env, command, slog.LevelDebug, &f.client)
	if err != nil {
		return nil, nil, nil, err
	}
	if f.namespace == "" {
		if f.namespace, err = f.client.DefaultNamespace(); err != nil {
			return nil, nil, nil, err
		}
	}
	ref, err := workloadRef(f.namespace, arg)
	if err != nil {
		return nil, nil, nil, err
	}
	res, err := load.Resolve(ctx, clients, ref)
	return ctx, clients, res, err
}

// parseInterspersed lets flags follow positional arguments (`history rollout/demo -n prod`, the way
// kubectl users type them); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := parse(fs, args, true); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// colorOutput colors only a terminal, and never when NO_COLOR is set (https://no-color.org).
func colorOutput(env Env) bool {
	if v, ok := env.Lookup("NO_COLOR"); ok && v != "" {
		return false
	}
	return isTerminal(env.Stdout)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func runHistory(ctx context.Context, env Env, args []string) error {
	var f readFlags
	output := printer.OutputTable
	fs := newFlagSet(env, "history", historySynopsis)
	f.addFlags(fs)
	fs.StringVar(&output, "output", output, "output format: table, json or yaml")
	fs.StringVar(&output, "o", output, "shorthand for -output")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usage("want one workload, e.g. history rollout/demo; got %d arguments", len(positional))
	}
	switch output {
	case printer.OutputTable, printer.OutputJSON, printer.OutputYAML:
	default:
		return usage("-o %q: use table, json or yaml", output)
	}
	ctx, clients, res, err := f.resolve(ctx, env, "history", positional[0])
	if err != nil {
		return err
	}
	h, err := load.History(ctx, clients, res)
	if err != nil {
		return err
	}
	return printer.Write(env.Stdout, h, output, time.Now(), printer.Style{Color: colorOutput(env)})
}
