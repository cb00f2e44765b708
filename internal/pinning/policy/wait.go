package policy

import (
	"time"
)

// Revisions without an entry. A revision that reads an object that does not exist (and not
// optionally) gets no entry until the object exists: an unlabelled object's creation brings no
// event, so the revision is looked at again after a while. Each looks costs API reads (the object,
// the revision's template), and a namespace can hold many such revisions: history (zero replicas) of
// a workload whose config was deleted since. Each revision waits on its own clock, and the namespace
// is requeued for the soonest; a revision on its clock is skipped, so it holds no other revision back.
//
// | the revision | next look |
// | --- | --- |
// | wants pods (their creation is refused meanwhile) | waitRetry |
// | has none (spec.replicas 0: history) | twice the last wait, from waitRetry up to maxWaitRetry |
// | changed since (its generation: scaled up, say) | at once |

// waitRetry is how soon a revision waiting for an object that does not exist is looked at again
// while it wants pods.
const waitRetry = 2 * time.Second

// maxWaitRetry bounds the wait of a revision with no pods.
const maxWaitRetry = 5 * time.Minute

// waiting is a revision without an entry.
type waiting struct {
	// since: when it was first seen without an entry it could not get.
	since time.Time
	// next: when to look at it again; delay: the last wait; generation: its generation then.
	next       time.Time
	delay      time.Duration
	generation int64
	// pods: it wants pods (they are refused meanwhile); what: what it waits for.
	pods bool
	what string
	// warned: its Warning Event was recorded.
	warned bool
}

// retry sets w's next look after a look at now that still found it waiting.
func (w *waiting) retry(now time.Time, generation int64, pods bool) {
	switch {
	case pods:
		w.delay = waitRetry
	case w.delay == 0:
		w.delay = waitRetry
	default:
		w.delay = min(2*w.delay, maxWaitRetry)
	}
	w.next, w.generation, w.pods = now.Add(w.delay), generation, pods
}

// due reports whether to look at the revision now: its clock has run, or it changed.
func (w *waiting) due(now time.Time, generation int64) bool {
	return w == nil || !now.Before(w.next) || generation != w.generation
}
