package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/internal/protection"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

const releaseSynopsis = `Take the in-use protection finalizer (configmap-attacher.io/in-use-protection) off every ConfigMap and
Secret, so nothing waits on a controller that is going away: what uninstalling the controller does (the
chart runs it as a pre-delete hook). ownerReferences stay: the garbage collector still deletes old config
with the last revision using it. An object already being deleted goes at once.

Without -stop-controller, stop the controller first (a running controller puts the finalizers back).
With zero-touch pinning, -delete-webhook-configuration first takes the pinning webhook out of the pod
path, while the controller still answers it: no pod is refused while the controller goes. In
admission policy mode, -delete-admission-policy first takes the policies' bindings out (then the
policies), so that no pod of a new revision waits for a table no controller keeps any more.

Usage:
  configmap-attacher release [-n NAMESPACE[,NAMESPACE...] | -A] [-delete-webhook-configuration NAME]
      [-delete-admission-policy NAME] [-stop-controller NS/DEPLOYMENT] [-kube-api-qps N] [-dry-run]

Examples:
  configmap-attacher release -A -delete-webhook-configuration configmap-attacher -stop-controller kube-system/configmap-attacher
  configmap-attacher release -n team-a,team-b -dry-run

Exit codes: 0 released (also when nothing carried the finalizer), 1 failed, 2 bad usage.
`

func runRelease(ctx context.Context, env Env, args []string) error {
	var (
		// At the controller's rate: 5,000 objects in about a minute (client-go's default, 5 QPS, would
		// take 17, beyond Helm's hook timeout).
		client     = kube.ClientOptions{QPS: 100, Burst: 200}
		namespaces string
		all        bool
		stop       string
		webhook    string
		admission  string
		dryRun     bool
		secrets    = true
	)
	fs := newFlagSet(env, "release", releaseSynopsis)
	client.AddFlags(fs)
	client.AddRateFlags(fs)
	fs.StringVar(&namespaces, "namespace", "", "comma-separated namespaces to release")
	fs.StringVar(&namespaces, "n", "", "shorthand for -namespace")
	fs.BoolVar(&all, "all-namespaces", false, "release every namespace")
	fs.BoolVar(&all, "A", false, "shorthand for -all-namespaces")
	fs.StringVar(&webhook, "delete-webhook-configuration", "", "MutatingWebhookConfiguration of the pinning webhook to delete first, before the controller stops answering it")
	fs.StringVar(&admission, "delete-admission-policy", "", "admission policies (and their bindings, first) of pinning's policy mode to delete first, before the controller stops")
	fs.StringVar(&stop, "stop-controller", "", "NAMESPACE/DEPLOYMENT of the controller to scale to 0 (and wait for) first")
	fs.BoolVar(&dryRun, "dry-run", false, "list what would be released; change nothing")
	fs.BoolVar(&secrets, "secrets", secrets, "release Secrets too (-secrets=false: the controller followed ConfigMaps only)")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	var scope []string
	for _, n := range strings.Split(namespaces, ",") {
		if n = strings.TrimSpace(n); n != "" {
			scope = append(scope, n)
		}
	}
	switch {
	case all && len(scope) > 0:
		return usage("-A and -n are exclusive")
	case !all && len(scope) == 0:
		return usage("name the namespaces (-n a,b) or release all of them (-A)")
	}
	var stopNS, stopName string
	if stop != "" {
		var ok bool
		if stopNS, stopName, ok = strings.Cut(stop, "/"); !ok || stopNS == "" || stopName == "" {
			return usage("-stop-controller %q must be NAMESPACE/DEPLOYMENT", stop)
		}
	}
	ctx, clients, err := connect(ctx, env, "release", slog.LevelInfo, &client)
	if err != nil {
		return err
	}
	if admission != "" && !dryRun {
		if err := policy.DeletePolicies(ctx, clients.Kube, admission); err != nil {
			return kube.Explain(err)
		}
	}
	if webhook != "" && !dryRun {
		if err := protection.DeleteWebhookConfiguration(ctx, clients.Kube, webhook); err != nil {
			return kube.Explain(err)
		}
	}
	if stop != "" && !dryRun {
		if err := protection.StopController(ctx, clients.Kube, stopNS, stopName, 2*time.Minute); err != nil {
			return kube.Explain(err)
		}
	}
	kinds := []refs.Kind{refs.ConfigMap}
	if secrets {
		kinds = append(kinds, refs.Secret)
	}
	n, err := protection.Release(ctx, &attach.Writer{Client: clients.Metadata}, scope, kinds, dryRun, env.Stdout)
	if err != nil {
		return kube.Explain(err)
	}
	verb := "released"
	if dryRun {
		verb = "would release"
	}
	fmt.Fprintf(env.Stdout, "%s %d objects\n", verb, n)
	return nil
}
