package adopt

import (
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Summary counts what Apply did (or, in a dry run, would do).
type Summary struct {
	// Objects changed, and Changes made: a label, an annotation or an ownerReference each.
	Objects, Changes int
}

// Apply adopts what p planned and prints one line per change to out. Every change is first sent as a
// server-side dry run, so RBAC and admission refuse before anything is written; with dryRun nothing
// more happens. Labels and the keep annotation go on before any ownerReference, and each object's patch
// is conditional on the version read: an object changed since (say, opted out) fails the run, which is
// safe to repeat. Running it again after success changes nothing.
func Apply(ctx context.Context, w *attach.Writer, p *Plan, dryRun bool, out io.Writer) (Summary, error) {
	var (
		sum      Summary
		labelled []*Object
		attaches []attach.Change
	)
	for _, o := range p.Objects {
		n := 0
		if o.AddLabel || o.AddKeep {
			labelled = append(labelled, o)
			n += btoi(o.AddLabel) + btoi(o.AddKeep)
		}
		for _, rev := range o.UsedBy {
			if !revision.OwnedBy(&o.Meta.ObjectMeta, rev.UID) {
				attaches = append(attaches, attach.Change{Object: o.Object, Revision: rev})
				n++
			}
		}
		if n > 0 {
			sum.Objects++
			sum.Changes += n
		}
	}
	for _, o := range labelled {
		if _, err := markPatch(ctx, w, o, true); err != nil {
			return Summary{}, fmt.Errorf("nothing was written: the API server refused a dry run: %w", err)
		}
	}
	if err := w.Validate(ctx, attaches); err != nil {
		return Summary{}, fmt.Errorf("nothing was written: the API server refused a dry run: %w", err)
	}
	for _, o := range labelled {
		if o.AddLabel {
			fmt.Fprintf(out, "%s: add label %s=%s\n", o.Object, api.RevisionedLabel, api.RevisionedValue)
		}
		if o.AddKeep {
			fmt.Fprintf(out, "%s: add annotation %s=%s\n", o.Object, ResourcePolicyAnnotation, KeepPolicy)
		}
		if dryRun {
			continue
		}
		m, err := markPatch(ctx, w, o, false)
		if err != nil {
			return sum, err
		}
		o.Meta = m // the attach step's write is conditional on the version it is given
	}
	for _, c := range attaches {
		fmt.Fprintln(out, c.Describe())
	}
	if dryRun {
		return sum, nil
	}
	for _, rev := range p.Revisions {
		var objs []attach.Object
		for _, o := range p.Objects {
			if usedBy(o, rev) {
				objs = append(objs, o.Object)
			}
		}
		if len(objs) == 0 {
			continue
		}
		r, err := w.Attach(ctx, rev, objs, attach.Options{})
		if err != nil {
			return sum, fmt.Errorf("attaching to %s: %w", rev.Describe(), err)
		}
		if len(r.Gone) > 0 {
			return sum, fmt.Errorf("%s was deleted while adopting: run adopt again", r.Gone[0].Object)
		}
	}
	return sum, nil
}

// markPatch adds the opt-in label and the keep annotation an object lacks, by strategic merge patch
// under our field manager, conditional on the version read: a label value someone set meanwhile (an
// opt-out) is never overwritten.
func markPatch(ctx context.Context, w *attach.Writer, o *Object, dryRun bool) (*metav1.PartialObjectMetadata, error) {
	meta := map[string]any{"resourceVersion": o.Meta.ResourceVersion}
	if o.AddLabel {
		meta["labels"] = map[string]string{api.RevisionedLabel: api.RevisionedValue}
	}
	if o.AddKeep {
		meta["annotations"] = map[string]string{ResourcePolicyAnnotation: KeepPolicy}
	}
	m, err := w.PatchMetadata(ctx, o.Object, meta, dryRun)
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("%s changed while adopting: run adopt again: %w", o.Object, err)
	}
	if err != nil {
		return nil, fmt.Errorf("labelling %s: %w", o.Object, err)
	}
	return m, nil
}

func usedBy(o *Object, rev *revision.Revision) bool {
	for _, r := range o.UsedBy {
		if r.UID == rev.UID {
			return true
		}
	}
	return false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
