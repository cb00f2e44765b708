package trigger

import (
	"maps"
	"sort"
	"time"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
)

// origin is where the newest revision comes from, as far as the record tells.
type origin string

const (
	firstSight origin = "first sight"    // nothing acknowledged yet: the workload just opted in
	acked      origin = "acknowledged"   // the revision acknowledged last time
	byUs       origin = "our write"      // the revision our last write made
	pending    origin = "pending"        // our last write is on the template, its revision not made yet
	madeSince  origin = "made since"     // made since, by someone else: a deploy
	older      origin = "an older again" // an older revision is the newest again: a rollback, the template changed back
)

// facts are what one decision reads. Contents are maps from what is read of an object (objectKey) to
// its content hash (absentContent, unknownContent).
type facts struct {
	origin origin
	// live is what the objects the workload follows hold now (L).
	live map[string]string
	// made is what the newest revision was made with, as far as known (M): a pinned object's snapshot
	// (unless the record knew the revision's content of it before it was pinned: a snapshot taken
	// later holds what the object held then); our write's content; the record's; else what the
	// objects held when it appeared (seen), else what they hold now.
	made map[string]string
	// seen is what the objects held when the newest revision appeared, in the order this process's
	// watches delivered the revision and the objects' versions (S); what the live content is where
	// that did not reach us.
	seen map[string]string
	// acked is the content acknowledged with the newest revision (A: acknowledged, our write, pending).
	acked map[string]string
	// edited: first sight of a workload an object of which changed while this process watched it.
	edited bool
	// quiet is how long the content has not changed (a long time when unknown).
	quiet, settle time.Duration
	// paused: the workload's controller makes no revision until it is resumed (a paused Deployment).
	paused bool
}

// verdict is what a decision calls for.
type verdict int

const (
	nothing   verdict = iota
	wait              // look again after step.after
	start             // write config-hash for the live content
	overruled         // the template changed back to a revision made with other content: tell, write nothing
)

// step is one decision: the content acknowledged from now on, and what to do.
type step struct {
	verdict verdict
	after   time.Duration
	// acked is the content acknowledged with the newest revision from now on.
	acked map[string]string
	// changed are the objects whose content changed since (start); differ, those the newest revision
	// was made with other content of (overruled).
	changed, differ []string
}

// decide is the trigger's one decision: facts in, one step out; sync gathers the facts and carries
// the step out. The same table is in docs/config-starts.md (Never a swallowed edit, never a fight).
// A change is a change of the content the newest revision reads, never the arrival of an event.
//
//	| newest revision (origin)      | acknowledged content A becomes                                  |
//	|-------------------------------|-----------------------------------------------------------------|
//	| pending: our write, not made  | unchanged; wait for its revision (paused: look on, below)       |
//	| first sight                   | L (opting in starts nothing); M where an edit reached us        |
//	|                               | while the workload followed it                                  |
//	| acknowledged                  | unchanged                                                       |
//	| our write                     | unchanged: what we wrote it for                                 |
//	| made since (a deploy)         | M                                                               |
//	| an older again (a rollback)   | S; when L = S and L ≠ M: Warning ConfigTriggerOverruled         |
//
// where M is what the newest revision was made with (facts.made: snapshots, the record, our write, or
// S) and S what the objects held when it appeared (facts.seen). An object A does not know yet (newly
// followed) starts from L. Then, with L what the objects hold now:
//
//	| L against A and the newest                  | then                                                   |
//	|---------------------------------------------|--------------------------------------------------------|
//	| L = A                                       | nothing                                                |
//	| L ≠ A, the content changed less than Settle | wait                                                   |
//	| ago                                         |                                                        |
//	| L ≠ A, the newest was made with L           | A = L (a deploy of config and template together)       |
//	| L ≠ A, otherwise                            | start: write config-hash (back to a revision made with |
//	|                                             | L, or a new value); A = L                              |
func decide(f facts) step {
	var a map[string]string
	switch f.origin {
	case pending:
		if !f.paused {
			return step{verdict: wait, after: waitAgain, acked: f.acked}
		}
		a = f.acked // paused: no revision comes until it is resumed; a change meanwhile rewrites ours
	case firstSight:
		a = maps.Clone(f.live)
		if f.edited {
			for k, v := range f.made {
				if _, ok := a[k]; ok {
					a[k] = v
				}
			}
		}
	case acked, byUs:
		a = f.acked
	case madeSince:
		a = f.made
	case older:
		a = f.seen
	}
	a = maps.Clone(a)
	for k, v := range f.live {
		if _, known := a[k]; !known {
			a[k] = v // newly followed: its content is where we start from
		}
	}
	var changed []string
	for k, v := range f.live {
		if a[k] != v {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	if len(changed) == 0 {
		if f.origin == older {
			if differ := differs(f.live, f.made); len(differ) > 0 {
				return step{verdict: overruled, acked: a, differ: differ}
			}
		}
		return step{verdict: nothing, acked: a} // paused and pending: its resume brings it back
	}
	if f.quiet < f.settle {
		return step{verdict: wait, after: f.settle - f.quiet, acked: a, changed: changed}
	}
	if f.origin != pending && sameContent(f.made, f.live) {
		return step{verdict: nothing, acked: maps.Clone(f.live)} // a deploy of config and template together
	}
	return step{verdict: start, acked: maps.Clone(f.live), changed: changed}
}

// differs are the objects whose live content is known to differ from what a revision was made with.
func differs(live, made map[string]string) []string {
	var out []string
	for k, v := range live {
		if m, ok := made[k]; ok && m != v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// sameContent reports whether a revision was created with exactly the live content of every
// followed object.
func sameContent(rev, live map[string]string) bool {
	for k, v := range live {
		if rev[k] != v {
			return false
		}
	}
	return true
}

// classify tells where the newest revision comes from (see decide), from the record and the
// revisions. Our last write, once its revision is known and a newer one came, is recorded as made
// with what we wrote it for. waited is how long our last write has waited for its revision; paused,
// whether the workload's controller makes none meanwhile.
func classify(rec *record, revs []*caches.User, tmpl *caches.User, waited time.Duration, paused bool, pinned map[string]bool) origin {
	newest := revs[0]
	ack := &rec.Acknowledged
	if wr := ack.Wrote; wr != nil {
		switch r := wr.made(revs); {
		case r != nil && r.UID == newest.UID:
			return byUs
		case r != nil:
			rec.resolveWrote(revs, pinned) // a newer one since: classified below
		case newest.UID == ack.Revision && templateCarries(tmpl, wr) && (paused || waited < pendingPatience):
			return pending
		case newest.UID == ack.Revision:
			// Undone before its revision was made (the template changed back), or its revision never
			// became the newest: as a template changed back.
			ack.Wrote = nil
			return older
		default:
			ack.Wrote = nil // another revision instead of ours: someone changed the template meanwhile
		}
	}
	switch {
	case ack.Revision == "":
		return firstSight
	case ack.Revision == newest.UID:
		return acked
	}
	if _, known := rec.Revisions[newest.UID]; known {
		return older
	}
	for _, r := range revs {
		if r.UID == ack.Revision {
			if newest.CreationTimestamp.Before(&r.CreationTimestamp) {
				return older
			}
			return madeSince
		}
	}
	return madeSince // the acknowledged revision is gone (pruned); sync tells an older one by its snapshots
}

// pendingPatience is how long a write of ours may wait for the revision it makes to become the newest
// (a cache behind, a controller slow to catch up) before it counts as undone: the trigger must never
// stop looking at a workload for good. A paused workload waits as long as it stays paused.
const pendingPatience = time.Minute

// templateCarries reports whether the pod template still carries what our write put there.
func templateCarries(tmpl *caches.User, wr *wrote) bool {
	if wr.Set {
		return carries(tmpl, wr.Value)
	}
	_, has := tmpl.TemplateAnnotations[api.ConfigHashAnnotation]
	return !has
}
