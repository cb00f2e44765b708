package attach

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Options are what differs between the callers of Attach; the step itself does not.
type Options struct {
	// Validate sends every change as a server-side dry run before the first write, so RBAC, admission
	// plugins and webhooks refuse before anything changes (the Job mode: nothing or everything).
	Validate bool
	// DryRun validates and writes nothing.
	DryRun bool
	// InFlight reports changes written moments ago whose effect the caller's cache has not shown yet
	// (the controller's expectations): they are skipped rather than sent again.
	InFlight func(Change) bool
	// Wanted re-checks an object read again after a write conflict (the controller: is it still
	// opted in?); a change whose object is no longer wanted is dropped. Nil wants everything.
	Wanted func(*metav1.PartialObjectMetadata) bool
}

// Result says what Attach found and did.
type Result struct {
	// Owned are the objects that already carried the reference.
	Owned []Object
	// Planned are the changes needed; with DryRun nothing more happened.
	Planned []Change
	// Skipped are the planned changes left out as in flight.
	Skipped []Change
	// Written are the changes written now, each with its object as the API server returned it (a
	// caller attaching again soon writes on top of it, not of a version it knows is stale).
	Written []Change
	// Gone are the changes whose object was deleted before it could be written.
	Gone []Change
	// Dropped are the changes whose object, read again, was no longer wanted.
	Dropped []Change
}

// Attach ties the config objects rev's pod template uses to rev: it plans (refusing what the garbage
// collector would punish), leaves out what is in flight, validates when asked, then writes what is
// missing. It is the one attach step of the Job mode and the controller.
func (w *Writer) Attach(ctx context.Context, rev *revision.Revision, objects []Object, o Options) (*Result, error) {
	changes, owned, err := Plan(rev, objects)
	if err != nil {
		return nil, err
	}
	r := &Result{Owned: owned, Planned: changes}
	todo := changes[:0:0]
	for _, c := range changes {
		if o.InFlight != nil && o.InFlight(c) {
			r.Skipped = append(r.Skipped, c)
			continue
		}
		todo = append(todo, c)
	}
	if len(todo) == 0 {
		return r, nil
	}
	if o.Validate || o.DryRun {
		if err := w.Validate(ctx, todo); err != nil {
			return r, fmt.Errorf("nothing was written: the API server refused a dry run: %w", err)
		}
	}
	if o.DryRun {
		return r, nil
	}
	return r, w.write(ctx, todo, o.Wanted, r)
}
