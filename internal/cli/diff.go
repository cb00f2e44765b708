package cli

import (
	"context"
	"strconv"

	"github.com/configmap-attacher/configmap-attacher/internal/history/load"
	"github.com/configmap-attacher/configmap-attacher/internal/history/printer"
)

const diffSynopsis = `Show what changed in the config between two revisions of a Rollout or a Deployment: a unified diff,
per ConfigMap and Secret and per key. Revisions of one object have different names (their content
hash); they are paired by kind and original name (annotation configmap-attacher.io/name, else the
name without its trailing -<hash>).

  no revision   a Rollout's stable revision against its canary while one is in progress; otherwise
                the previous revision against the current one
  FROM          revision FROM against the current one
  FROM TO       revision FROM against revision TO
  [FROM] live   revision FROM (default: the current one) against the live objects: pinned objects as
                they are now, i.e. what the next revision would be pinned to

With zero-touch pinning, a revision's pods read the snapshot it owns of each pinned object, not the
object: diff compares those snapshots, so a config changed in place shows as a content change.

Secret values are never printed unless -show-secrets: changed, added and removed keys are listed with
a keyed hash of each value (random key per run: equal hashes in one output mean equal values, and the
hash gives nothing to guess a value from). A config object that no longer exists (deleted, or
garbage-collected with its last ReplicaSet) is reported as such.

Usage:
  configmap-attacher diff KIND/NAME [FROM [TO]] [-n NAMESPACE] [-show-secrets] [flags]
  configmap-attacher diff KIND/NAME [FROM] live [-n NAMESPACE] [-show-secrets] [flags]
  kubectl configmap-revisions diff KIND/NAME [FROM [TO]] [-n NAMESPACE]   (installed as a kubectl plugin)

KIND is rollout (ro) or deployment (deploy); FROM and TO are revision numbers, as 'history' lists
them. Flags may come before or after the arguments.

Examples:
  configmap-attacher diff rollout/demo -n devops-apps-01          (what the paused canary changes)
  configmap-attacher diff rollout/demo 3 4 -n devops-apps-01
  configmap-attacher diff deployment/web 2 | less -R
  configmap-attacher diff rollout/demo live                        (a pinned config changed in place)

Environment:
  IS_IN_CLUSTER  unset: kubeconfig like kubectl (in a pod: its service account); false: kubeconfig
  LOG_LEVEL      debug, info (default), warn, error: logs go to stderr, output to stdout
  NO_COLOR       set: no colors (colors are only ever used when stdout is a terminal)

Exit codes: 0 compared (also when the config differs), 1 failed (unknown workload, kind or revision,
API error), 2 bad usage.

See docs/history.md.
`

func runDiff(ctx context.Context, env Env, args []string) error {
	var f readFlags
	var showSecrets bool
	fs := newFlagSet(env, "diff", diffSynopsis)
	f.addFlags(fs)
	fs.BoolVar(&showSecrets, "show-secrets", false, "print Secret values (default: keys and keyed hashes only)")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	live := len(positional) > 1 && positional[len(positional)-1] == "live"
	if live {
		positional = positional[:len(positional)-1]
	}
	switch {
	case len(positional) < 1 || len(positional) > 3:
		return usage("want a workload and up to two revisions, e.g. diff rollout/demo 3 4; got %d arguments", len(positional))
	case live && len(positional) > 2:
		return usage("live is compared with one revision at most: diff KIND/NAME [FROM] live")
	}
	var revisions []int64
	for _, a := range positional[1:] {
		if a == "live" {
			return usage("live comes last: diff KIND/NAME [FROM] live")
		}
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 1 {
			return usage("revision %q is not a revision number (1, 2, ...; 'history' lists them)", a)
		}
		revisions = append(revisions, n)
	}
	ctx, clients, res, err := f.resolve(ctx, env, "diff", positional[0])
	if err != nil {
		return err
	}
	// Select first, then read only the two revisions' objects: no other Secret is read.
	c, err := load.Comparison(ctx, clients, res, revisions, live)
	if err != nil {
		return err
	}
	return printer.WriteDiff(env.Stdout, c, printer.DiffOptions{
		ShowSecrets: showSecrets, Context: printer.DefaultContext, Style: printer.Style{Color: colorOutput(env)},
	})
}
