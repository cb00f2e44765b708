package trigger

import (
	"maps"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
)

// The trigger's rules. Each is a pure function over one snapshot of facts that sync.go gathers (the
// caches, the record, what this process noted, the API server's answers), and act.go carries the
// step out. The same rules, in the same words, are in docs/config-starts.md (The rules).
//
//	| rule          | function      | from                                  | gives                          |
//	|---------------|---------------|---------------------------------------|--------------------------------|
//	| origin        | classify      | the record, the revisions, how long   | where the newest revision      |
//	|               |               | our write waited, paused              | comes from (table 1)           |
//	| appearance    | seenAt        | per object: what this process noted   | S: what it held when the       |
//	|               |               | as the newest appeared, else what the | newest appeared (table 2)      |
//	|               |               | API server tells (versions, values)   |                                |
//	| made with     | madeWith      | the record, snapshots, our write, S   | M (table 3)                    |
//	| settle clock  | tickClock,    | the content each look saw, when the   | how long the content has not   |
//	|               | holdSince     | last event came, how long held        | changed; how long held back    |
//	| snapshot wait | snapshotWait  | a pinned object's snapshot missing    | wait, or decide without it     |
//	|               |               | and for how long                      | once -config-max-wait passed   |
//	| ownership     | ownership,    | the other field managers owning       | write, take back, or leave it  |
//	|               | writtenFor    | config-hash, its value, the record    | (table 4)                      |
//	| the decision  | decide        | all of the above                      | one step (tables 5 and 6)      |

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

// ackChange is what classify found of our last write, for sync to record.
type ackChange int

const (
	ackKept     ackChange = iota
	ackResolved           // its revision appeared and a newer one came since: recorded as made with what we wrote it for
	ackDropped            // undone before its revision came, or another revision came instead: forgotten
)

// classFacts are what the origin is told from.
type classFacts struct {
	rec  *record // read only
	revs []*caches.User
	tmpl *caches.User // the workload holding the pod template
	// waited is how long our last write has waited for its revision; paused, whether the workload's
	// controller makes none meanwhile.
	waited time.Duration
	paused bool
	// prunedDiffers: the acknowledged revision is gone (pruned) and the newest's snapshots say it was
	// made with other content than acknowledged (an older revision the record does not know).
	prunedDiffers bool
}

// classify tells where the newest revision comes from (table 1).
//
//	| our last write (record ack.wrote)            | then                                           |
//	|----------------------------------------------|------------------------------------------------|
//	| made the newest revision                     | our write                                      |
//	| made a revision, a newer one came since      | resolved (made with what we wrote it for), go on |
//	| on the template, no revision yet, waited     | pending                                        |
//	| less than a minute (or paused)               |                                                |
//	| off the template (undone), no revision       | an older again; forgotten                      |
//	| another revision instead                     | forgotten, go on                               |
//	| then: nothing acknowledged                   | first sight                                    |
//	| the newest is the acknowledged one           | acknowledged                                   |
//	| the record knows the newest                  | an older again                                 |
//	| the newest was created before the acked one  | an older again                                 |
//	| else (the acknowledged one is pruned: an     | made since                                     |
//	| older again when its snapshots say so)       |                                                |
func classify(f classFacts) (origin, ackChange) {
	newest := f.revs[0]
	ack := f.rec.Acknowledged
	known := func(uid types.UID) bool { _, ok := f.rec.Revisions[uid]; return ok }
	change := ackKept
	if wr := ack.Wrote; wr != nil {
		switch r := wr.made(f.revs); {
		case r != nil && r.UID == newest.UID:
			return byUs, ackKept
		case r != nil:
			change, ack.Revision = ackResolved, r.UID
			if wr.Back == "" {
				was := known
				known = func(uid types.UID) bool { return uid == r.UID || was(uid) }
			}
		case newest.UID == ack.Revision && templateCarries(f.tmpl, wr) && (f.paused || f.waited < pendingPatience):
			return pending, ackKept
		case newest.UID == ack.Revision:
			// Undone before its revision was made (the template changed back), or its revision never
			// became the newest: as a template changed back.
			return older, ackDropped
		default:
			change = ackDropped // another revision instead of ours: someone changed the template meanwhile
		}
	}
	switch {
	case ack.Revision == "":
		return firstSight, change
	case ack.Revision == newest.UID:
		return acked, change
	case known(newest.UID):
		return older, change
	}
	for _, r := range f.revs {
		if r.UID == ack.Revision {
			if newest.CreationTimestamp.Before(&r.CreationTimestamp) {
				return older, change
			}
			return madeSince, change
		}
	}
	if f.prunedDiffers {
		return older, change
	}
	return madeSince, change
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

// objectFacts are what one decision knows of one followed object, for the newest revision.
type objectFacts struct {
	key  string
	live string // what it holds now (L)
	// optional: read through optional references alone; absent: such an object that does not exist.
	optional, absent bool
	pinned           bool
	// recorded: what the record says the newest revision was made with of it.
	recorded    string
	hasRecorded bool
	// snapshot: what the newest revision's snapshot of it holds.
	snapshot    string
	hasSnapshot bool
	// acknowledged: the record's acknowledged content has it; unchanged: it holds that content still,
	// or is still at the version at which it held it (record.Versions: what a Secret whose key was
	// lost is known by).
	acknowledged, unchanged bool
	// afterRevision: its version was written after the newest revision's last write (resourceVersions
	// of one etcd are ordered), so after the revision was made.
	afterRevision bool
	// appearance is what this process noted as the newest revision appeared (nil: it appeared while
	// this process was away, or before it had listed).
	appearance *appearanceFacts
}

// appearanceFacts are what this process noted of an object as the newest revision appeared.
type appearanceFacts struct {
	followed bool   // the workload followed it then
	rv       string // its version then ("": it did not exist)
	// sameVersion: it is at that version still; writtenBefore: its version now was written before the
	// revision was created (two watches, no order between them: the resourceVersions tell).
	sameVersion, writtenBefore bool
	// earlier: its content at rv, if this process hashed that version.
	earlier      string
	earlierKnown bool
}

// seenAt is S for one object: what it held when the newest revision appeared (table 2). valueFits:
// the newest's template carries a config-hash of ours written for exactly the live content.
//
//	| what is known                                             | S                                |
//	|-----------------------------------------------------------|----------------------------------|
//	| this process saw the revision appear: the object was not  | L                                |
//	| followed then, is at the version it was at, or its version |                                  |
//	| was written before the revision                           |                                  |
//	| ... it did not exist then (read as optional)              | absent                           |
//	| ... the version it was at was hashed                      | that content                     |
//	| ... otherwise                                             | unknown                          |
//	| it appeared while this process was away: the object holds | L                                |
//	| the acknowledged content (or is at its version), or the   |                                  |
//	| newest carries a value of ours written for L              |                                  |
//	| ... the object is newly followed, not written after the   | L                                |
//	| revision                                                  |                                  |
//	| ... otherwise (changed while we were away, order unknown) | unknown: errs toward a revision  |
func seenAt(o objectFacts, valueFits bool) string {
	if a := o.appearance; a != nil {
		switch {
		case !a.followed, a.sameVersion, !o.absent && a.writtenBefore:
			return o.live
		case a.rv == "":
			if o.optional {
				return absentContent // it did not exist then
			}
			return o.live
		case a.earlierKnown:
			return a.earlier
		}
		return unknownContent
	}
	switch {
	case o.unchanged, valueFits, !o.acknowledged && !o.afterRevision:
		return o.live
	}
	return unknownContent
}

// madeWith is M for one object: what the newest revision was made with, if known (table 3).
//
//	| source, first that applies                                     | M                         |
//	|----------------------------------------------------------------|---------------------------|
//	| the record's entry for the newest revision                     | that (known before any    |
//	|                                                                | snapshot taken since)     |
//	| our write, the object not pinned or its snapshot missing       | what we wrote it for (A)  |
//	| the newest revision's snapshot                                 | its content               |
//	| first sight, made since, an older again                        | S                         |
//	| otherwise                                                      | not known                 |
func madeWith(o objectFacts, from origin, acked map[string]string, seen string) (string, bool) {
	switch {
	case o.hasRecorded:
		return o.recorded, true
	case from == byUs && (!o.pinned || !o.hasSnapshot):
		h, ok := acked[o.key]
		return h, ok
	case o.hasSnapshot:
		return o.snapshot, true
	case from == firstSight || from == madeSince || from == older:
		return seen, true
	}
	return "", false
}

// clock is what this process knows of when the content a workload reads changed.
type clock struct {
	// live is the content its last look saw (nil: none yet); quietSince, when that content was first
	// seen changed (the event that brought the change; zero: not while this process watched).
	live       map[string]string
	quietSince time.Time
	// heldSince: since when a change has been held back by the settle window (zero: none); moving,
	// the objects whose content changed meanwhile, and how often.
	heldSince time.Time
	moving    map[string]int
}

// tickClock is the settle clock after a look that sees live: the window runs from the event that
// brought the content change (changedAt), not from the last event, so labels and annotations changing
// in a loop do not hold a change back; edited, whether an event reached this process at all.
//
//	| the look                                  | quietSince                        |
//	|-------------------------------------------|-----------------------------------|
//	| the first, no event seen                  | none: quiet for a long time       |
//	| the first after an event, or content      | the last event's time             |
//	| other than the last look's                |                                   |
//	| the same content as the last look's       | unchanged                         |
func tickClock(prev clock, live map[string]string, changedAt time.Time, edited bool) clock {
	next := prev
	if prev.live != nil && maps.Equal(prev.live, live) {
		return next
	}
	if prev.live != nil || edited {
		next.quietSince = changedAt
	}
	if prev.live != nil && !prev.heldSince.IsZero() {
		next.moving = maps.Clone(prev.moving)
		if next.moving == nil {
			next.moving = map[string]int{}
		}
		for k, v := range live {
			if prev.live[k] != v {
				next.moving[k]++
			}
		}
	}
	next.live = maps.Clone(live)
	return next
}

// quiet is how long the content has not changed, now (a long time when no change reached this process).
func (c clock) quiet(now time.Time) time.Duration {
	if c.quietSince.IsZero() {
		return huge
	}
	return now.Sub(c.quietSince)
}

// held is how long a change has been held back by the settle window, now.
func (c clock) held(now time.Time) time.Duration {
	if c.heldSince.IsZero() {
		return 0
	}
	return now.Sub(c.heldSince)
}

// holdSince is the clock after the decision: held from the change's event while the settle window
// holds it back, released by any other step.
func holdSince(c clock, settling bool, now time.Time) clock {
	switch {
	case !settling:
		c.heldSince, c.moving = time.Time{}, nil
	case c.heldSince.IsZero() && !c.quietSince.IsZero():
		c.heldSince = c.quietSince
	case c.heldSince.IsZero():
		c.heldSince = now
	}
	return c
}

// snapshotWait decides on a pinned object whose snapshot for the newest revision is not there yet:
// the pinning controller is taking it. Wait (looking again after after) until maxWait has passed since
// this process began waiting (waited), then decide without it (gaveUp), and tell.
func snapshotWait(missing bool, waited, maxWait time.Duration) (wait bool, after time.Duration, gaveUp bool) {
	switch {
	case !missing:
		return false, 0, false
	case waited < maxWait:
		return true, min(waitAgain, maxWait-waited), false
	}
	return false, 0, true
}

// ownership decides on writing config-hash where other field managers (owners) own it on the template
// (table 4), with the value there (has: there is one) and the values the record knows as ours.
//
//	| config-hash on the template                       | then                                     |
//	|---------------------------------------------------|------------------------------------------|
//	| owned by no other field manager                   | write                                    |
//	| owned by another, its value ours (proves itself,  | take back: a forced apply, conditional   |
//	| or one the record holds)                          | on the resourceVersion read              |
//	| owned by another, any other value (or none)       | leave it: Warning ConfigTriggerOverruled |
func ownership(owners []string, has bool, value string, values map[string]bool) (takeBack, refuse bool) {
	switch {
	case len(owners) == 0:
		return false, false
	case has && oursValue(value, values):
		return true, false
	}
	return false, true
}

// oursValue reports whether a config-hash value is one we wrote: it proves itself, or the record holds it
// (a value written before values carried their check).
func oursValue(v string, values map[string]bool) bool { return proves(v) || values[v] }

// writtenFor reports whether config-hash value v is one of ours written for content hash h: what a
// revision carrying it was written for, known without the record.
func writtenFor(v string, values map[string]bool, h string) bool {
	switch {
	case proves(v):
		return contentHashOf(v) == h
	case values[v]:
		b, _, _ := strings.Cut(v, "-")
		return b == h
	}
	return false
}

// facts are what one decision reads. Contents are maps from what is read of an object (objectKey) to
// its content hash (absentContent, unknownContent).
type facts struct {
	origin origin
	// live is what the objects the workload follows hold now (L).
	live map[string]string
	// made is what the newest revision was made with, as far as known (M: madeWith).
	made map[string]string
	// seen is what the objects held when the newest revision appeared (S: seenAt).
	seen map[string]string
	// acked is the content acknowledged with the newest revision (A: acknowledged, our write, pending).
	acked map[string]string
	// edited: first sight of a workload an object of which changed while this process watched it.
	// lostRecord: first sight of a workload whose newest revision carries a value of ours written for
	// other content than L (its record lost, or never written).
	edited, lostRecord bool
	// startsFrom: for an object newly followed that changed before a look could read the version it
	// was at as the follow began, what it held then (unknownContent when not hashed): noteFollowed.
	startsFrom map[string]string
	// quiet is how long the content has not changed (a long time when unknown); held, how long a
	// change has been held back by the settle window (0: none).
	quiet, settle, held, maxWait time.Duration
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
	// settling: the wait is the settle window's; timedOut: the start comes after -config-max-wait
	// without the content settling (tell what kept it waiting).
	settling, timedOut bool
	// acked is the content acknowledged with the newest revision from now on.
	acked map[string]string
	// changed are the objects whose content changed since (start); differ, those the newest revision
	// was made with other content of (overruled).
	changed, differ []string
}

// decide is the trigger's one decision: facts in, one step out (tables 5 and 6, as in
// docs/config-starts.md). A change is a change of the content the newest revision reads, never the
// arrival of an event.
//
//	| newest revision (origin)      | acknowledged content A becomes (table 5)                        |
//	|-------------------------------|-----------------------------------------------------------------|
//	| pending: our write, not made  | unchanged; wait for its revision (paused: look on, below)       |
//	| first sight                   | L (opting in starts nothing); M where an edit reached us while  |
//	|                               | the workload followed it, or where its newest revision carries  |
//	|                               | a value of ours written for other content (a lost record)       |
//	| acknowledged                  | unchanged                                                       |
//	| our write                     | unchanged: what we wrote it for                                 |
//	| made since (a deploy)         | M                                                               |
//	| an older again (a rollback)   | S; when L = S and L ≠ M: Warning ConfigTriggerOverruled         |
//
// An object A does not know yet (newly followed) starts from L, or, when it changed after the first
// look that followed it and before any look could read it, from what it held then (unknown when not
// read: a change). Then, with L what the objects hold now
// (table 6):
//
//	| L against A and the newest                  | then                                                   |
//	|---------------------------------------------|--------------------------------------------------------|
//	| L = A                                       | nothing                                                |
//	| L ≠ A, the content changed less than Settle | wait, at most -config-max-wait from the change: then   |
//	| ago                                         | on, with Warning ConfigNeverSettled                    |
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
		if f.edited || f.lostRecord {
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
			if from, changed := f.startsFrom[k]; changed {
				a[k] = from // unless it changed since the follow began
			}
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
	timedOut := false
	if f.quiet < f.settle {
		if f.held < f.maxWait {
			return step{verdict: wait, after: min(f.settle-f.quiet, f.maxWait-f.held), settling: true, acked: a, changed: changed}
		}
		timedOut = true
	}
	if f.origin != pending && sameContent(f.made, f.live) {
		return step{verdict: nothing, acked: maps.Clone(f.live)} // a deploy of config and template together
	}
	return step{verdict: start, timedOut: timedOut, acked: maps.Clone(f.live), changed: changed}
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
