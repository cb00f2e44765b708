package cli

import (
	"context"
	"errors"
	"flag"
	"log/slog"

	"github.com/configmap-attacher/configmap-attacher/internal/render"
)

const renderSynopsis = `Give opted-in ConfigMaps and Secrets a name made of their content hash, and point the pod templates
that use them at that name. A config change then creates a new object instead of changing the one the
running pods mount: during a canary, old pods keep the old config and new pods get the new one.

Reads Kubernetes manifests (multi-document YAML, List kinds too) from stdin or from FILEs, writes them
to stdout. Only the intended changes are made; everything else is written back as read.

Opt an object in with the label  configmap-attacher.io/revisioned: "true"  (or the flags below).
For each opted-in ConfigMap/Secret in the input, render:
  - renames it <name>-<hash>: the hash is the first 10 hex digits of the SHA-256 of its content (data,
    binaryData, stringData merged into data, type), so the same content gets the same name anywhere
    (names longer than 242 characters are cut before the hash);
  - sets immutable: true, the label above, the annotation configmap-attacher.io/name: <name>, and
    helm.sh/resource-policy: keep (so helm upgrade leaves the previous revision to the old pods; the
    garbage collector deletes it with the last ReplicaSet using it, once attached);
  - rewrites every reference to it in the same namespace that belongs to a revision: pod templates
    of Rollouts, Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs, Pods and
    PodTemplates, and of Argo Rollouts' AnalysisTemplates, ClusterAnalysisTemplates and Experiments
    (volumes: configMap, secret, projected, and the Secrets of csi, azureFile, cephfs, rbd, iscsi,
    flexVolume... volumes; imagePullSecrets; envFrom and env valueFrom, in containers and
    initContainers), and an AnalysisTemplate's Secret arguments.
It refuses (exit 1, one line naming the document, the field and the fix) rather than leave a
reference to a renamed object: from a user that follows no revision (an Ingress's TLS Secret, a
ServiceAccount's secrets, a PersistentVolume, a Gateway), from inside a string (a container argument
like --configmap=ns/name, an env value, a ConfigMap value ns/name), or across a namespace it cannot
tell (an object without metadata.namespace and no -namespace). Given the chart (-chart DIR), it also
refuses to rename an object its template reads back with Helm's lookup (a generated password): renamed,
the lookup finds nothing and every upgrade generates new values; -allow-lookup once they are given.
Rendering rendered output again changes nothing. Objects without metadata.namespace are in the
-namespace namespace. Warnings go to stderr; stdout gets manifests only, and nothing at all on error.

Usage:
  configmap-attacher render [flags] [FILE...]      (FILE "-" or none: stdin)

Examples:
  # Helm post-renderer (Helm runs it with the rendered chart on stdin): Helm 4 through the plugin
  # (docs/helm.md: helm plugin install oci://…/configmap-attacher:<version>-<os>-<arch> --keyring <key>),
  # Helm 3 as an executable:
  helm upgrade --install demo ./chart -n prod --post-renderer configmap-attacher \
    --post-renderer-args render --post-renderer-args=-namespace=prod

  # kubectl pipeline, revisioning every ConfigMap not labelled "false":
  kustomize build overlays/prod | configmap-attacher render -all-configmaps | kubectl apply -f -

  # unlabelled objects, by name:
  configmap-attacher render -select configmap/app-config,secret/app-env app.yaml > rendered.yaml

Environment:
  LOG_LEVEL  debug, info (default), warn, error; LOG_FORMAT json or text (default: text on a terminal)

Exit codes: 0 rendered, 1 the input was refused (the error names the document; nothing written),
2 bad usage.
`

func runRender(ctx context.Context, env Env, args []string) error {
	o := render.NewOptions()
	fs := newFlagSet(env, "render", renderSynopsis)
	o.AddFlags(fs)
	// The flag package prints the usage on every parse error; as a post-renderer, stdout must carry
	// manifests only, so the usage is printed for -h alone.
	printUsage := fs.Usage
	fs.Usage = func() {}
	if err := parse(fs, args, true); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage()
		}
		return err
	}
	o.Files = fs.Args()
	if err := o.Validate(); err != nil {
		return usageError{err}
	}
	ctx, err := setupLogging(ctx, env, "render", slog.LevelDebug)
	if err != nil {
		return err
	}
	return render.Run(ctx, o, env.Stdin, env.Stdout)
}
