package job

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// ErrTimeout means the workload's current ReplicaSet never came to reference every named object.
var ErrTimeout = errors.New("timed out")

// recheckEvery bounds how stale our view of config objects gets: we watch the workload and its
// ReplicaSets, but only GET config objects (watching Secrets would need list on all of them).
const recheckEvery = 2 * time.Second

// Run attaches the named objects to the workload's current ReplicaSet. Nothing is written unless every
// check passed and the server accepted every change in a dry run.
func Run(ctx context.Context, o *Options, clients *kube.Clients, stdout io.Writer) error {
	ref := o.Workload()
	targets := o.Targets()
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("workload", ref.String()))
	log := logging.FromContext(ctx)

	if err := kube.WaitReachable(ctx, clients.Kube, clients.Config.Host); err != nil {
		return err
	}
	if err := checkNamespace(ctx, clients, ref.Namespace); err != nil {
		return err
	}

	waitCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	w, err := startWatcher(waitCtx, clients, ref)
	if err != nil {
		if waitCtx.Err() != nil {
			return fmt.Errorf("%w after %s starting watches on %s", ErrTimeout, o.Timeout, ref)
		}
		return err
	}
	get := func(t refs.Ref) (*metav1.PartialObjectMetadata, error) {
		return clients.Metadata.Resource(attach.GVR(t.Kind)).Namespace(ref.Namespace).Get(waitCtx, t.Name, metav1.GetOptions{})
	}

	ticker := time.NewTicker(recheckEvery)
	defer ticker.Stop()
	var last string
	for {
		r, err := checkReady(w, get, ref, targets)
		if err != nil {
			if waitCtx.Err() != nil && ctx.Err() == nil {
				return fmt.Errorf("%w after %s: %v", ErrTimeout, o.Timeout, err)
			}
			return err
		}
		if r.Ready() {
			return attachAll(ctx, o, clients, r, stdout)
		}
		if now := strings.Join(r.Pending, "; "); now != last {
			log.Info("waiting", "for", r.Pending)
			last = now
		}
		select {
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w after %s waiting for %s: %s", ErrTimeout, o.Timeout, ref, strings.Join(r.Pending, "; "))
		case <-w.changed:
		case <-ticker.C:
		}
	}
}

func attachAll(ctx context.Context, o *Options, clients *kube.Clients, r *readiness, stdout io.Writer) error {
	log := logging.FromContext(ctx).With("replicaSet", r.ReplicaSet.Name)
	names := make([]string, len(r.Objects))
	for i, o := range r.Objects {
		names[i] = o.String()
	}
	log.Info("resolved current ReplicaSet", "uid", r.ReplicaSet.UID, "revision", workload.Revision(r.ReplicaSet), "objects", names)
	changes, err := attach.Plan(r.ReplicaSet, r.Objects)
	if err != nil {
		return err
	}
	planned := map[string]bool{}
	for _, c := range changes {
		planned[c.Object.String()] = true
	}
	for _, obj := range r.Objects {
		if !planned[obj.String()] {
			log.Info("already attached", "object", obj.String())
			if o.DryRun {
				fmt.Fprintf(stdout, "%s: already attached to ReplicaSet %s\n", obj, r.ReplicaSet.Name)
			}
		}
	}
	if len(changes) == 0 {
		log.Info("nothing to do")
		return nil
	}
	hostname, _ := os.Hostname()
	writer := &attach.Writer{Client: clients.Metadata, Events: &attach.APIEvents{Client: clients.Kube, Instance: hostname}}
	if err := writer.Validate(ctx, changes); err != nil {
		return fmt.Errorf("nothing was written: the API server refused a dry run: %w", explainWrite(err))
	}
	if o.DryRun {
		for _, c := range changes {
			fmt.Fprintln(stdout, c.Describe())
		}
		log.Info("dry run: nothing written", "changes", len(changes))
		return nil
	}
	written, err := writer.Apply(ctx, changes)
	if err != nil {
		return fmt.Errorf("attached %d of %d objects, then: %w", len(written), len(changes), explainWrite(err))
	}
	log.Info("done", "attached", len(written))
	return nil
}

// checkNamespace fails fast on a namespace that does not exist. The original tool's RBAC has no access
// to namespaces; then we skip the check and the workload lookup reports the problem instead.
func checkNamespace(ctx context.Context, clients *kube.Clients, ns string) error {
	_, err := clients.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %q not found: check -namespace", ns)
	case apierrors.IsForbidden(err):
		logging.FromContext(ctx).Debug("cannot get namespaces; skipping the namespace check", "namespace", ns)
		return nil
	}
	return fmt.Errorf("reading namespace %s: %w", ns, err)
}

func explainWrite(err error) error {
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot set an ownerRef") {
		return fmt.Errorf("%w (with the OwnerReferencesPermissionEnforcement admission plugin, the attacher also needs delete on the object: see docs/rbac.md)", err)
	}
	return kube.Explain(err)
}
