package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/internal/adopt"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
)

const adoptSynopsis = `Prepare a workload deployed without 'render' for its first upgrade with it. That upgrade renames its
config objects, and Helm deletes the old names while the running pods still mount them. adopt gives every
ConfigMap and Secret the workload's revisions (ReplicaSets, ControllerRevisions) reference what render
would have given it:
  label       configmap-attacher.io/revisioned: "true"
  annotation  helm.sh/resource-policy: keep       (helm upgrade leaves it to the old pods)
  ownerReference to each revision using it       (the garbage collector deletes it with the last one)
Only objects deployed the way the workload is (the same Helm release or Argo CD application) are
adopted: an upgrade deletes no other, and another release's Secret must not become garbage with this
workload. Objects opted out (revisioned=false), missing or being deleted are left alone. Every change is
validated by a server-side dry run before the first write; running adopt again changes nothing.

Usage:
  configmap-attacher adopt KIND/NAME [-n NAMESPACE] [-dry-run]

KIND is deployment (deploy), rollout (ro), statefulset (sts) or daemonset (ds). Flags may come before or
after KIND/NAME; the namespace defaults to the kubeconfig context's.

Examples:
  configmap-attacher adopt deployment/web -n prod -dry-run
  configmap-attacher adopt rollout/demo -n prod
  helm upgrade demo ./chart -n prod --post-renderer configmap-attacher --post-renderer-args render ...

Output: one line per change, then 'adopted N objects (M changes)' ('would adopt ...' with -dry-run).
Exit codes: 0 adopted (also when nothing was left to do), 1 failed or refused (nothing written when the
refusal comes before the first write), 2 bad usage.

See docs/render.md (migrating an existing release).
`

func runAdopt(ctx context.Context, env Env, args []string) error {
	var (
		f      readFlags
		dryRun bool
	)
	fs := newFlagSet(env, "adopt", adoptSynopsis)
	f.addFlags(fs)
	fs.BoolVar(&dryRun, "dry-run", false, "print what would change; change nothing")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usage("adopt takes one KIND/NAME, e.g. deployment/web")
	}
	kindName, name, ok := strings.Cut(pos[0], "/")
	if !ok || kindName == "" || name == "" {
		return usage("workload %q must be written KIND/NAME, e.g. deployment/web or rollout/demo", pos[0])
	}
	kind, err := adopt.ParseKind(kindName) // an unknown kind exits 1, as kubectl's unknown resource type
	if err != nil {
		return err
	}
	ctx, clients, err := connect(ctx, env, "adopt", slog.LevelInfo, &f.client)
	if err != nil {
		return err
	}
	if f.namespace == "" {
		if f.namespace, err = f.client.DefaultNamespace(); err != nil {
			return err
		}
	}
	w := adopt.Workload{Kind: kind, Namespace: f.namespace, Name: name}
	plan, err := adopt.Read(ctx, clients, w)
	if err != nil {
		return kube.Explain(err)
	}
	for _, s := range plan.Skipped {
		fmt.Fprintln(env.Stdout, s)
	}
	sum, err := adopt.Apply(ctx, &attach.Writer{Client: clients.Metadata}, plan, dryRun, env.Stdout)
	if err != nil {
		return kube.Explain(err)
	}
	verb := "adopted"
	if dryRun {
		verb = "would adopt"
	}
	fmt.Fprintf(env.Stdout, "%s %d objects (%d changes)\n", verb, sum.Objects, sum.Changes)
	return nil
}
