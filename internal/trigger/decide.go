package trigger

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
)

// look is what one sync read of a workload: decide's input.
type look struct {
	w      *caches.User
	tmpl   *caches.User   // the workload holding the pod template, as cached
	revs   []*caches.User // its revisions, newest first
	objs   []followed
	pinned map[string]bool
	live   map[string]string // what the objects hold now: objectKey -> content hash
	rec    *record
}

// origin is where the newest revision comes from, as far as the record and the events that reached
// us tell.
type origin string

const (
	firstSight origin = "first sight"    // nothing acknowledged yet: the workload just opted in
	acked      origin = "acknowledged"   // the revision acknowledged last time
	byUs       origin = "our write"      // the revision our last write made
	pending    origin = "pending"        // our last write is on the template, its revision not made yet
	madeSince  origin = "made since"     // made since, by someone else: a deploy
	older      origin = "an older again" // an older revision is the newest again: a rollback, the template changed back
)

// decide is one decision over three things: what changed (the live content against the content
// acknowledged), what the newest revision was made with, and what we wrote. The same table is in
// docs/config-starts.md (Never a swallowed edit, never a fight).
//
//	| newest revision (origin)      | made with                                   | acknowledged content A becomes             |
//	|-------------------------------|---------------------------------------------|--------------------------------------------|
//	| pending: our write, not made  | -                                           | - (wait for its revision)                  |
//	| first sight                   | its snapshots, else what the objects hold   | what they hold (opting in starts nothing); |
//	|                               |                                             | an edit seen since: what it was made with  |
//	| acknowledged                  | its snapshots, else the record              | unchanged                                  |
//	| our write                     | what we wrote it for (record: Written)      | unchanged: what we wrote it for            |
//	| made since (a deploy)         | its snapshots, else what the objects held   | what it was made with                      |
//	|                               | when it appeared (an edit that reached us   |                                            |
//	|                               | after it counts as a change since)          |                                            |
//	| an older again (a rollback)   | its snapshots, else the record              | what the objects hold, Warning             |
//	|                               |                                             | ConfigTriggerOverruled when that is not    |
//	|                               |                                             | what it was made with; unless an edit      |
//	|                               |                                             | reached us after it came back: unchanged   |
//
// Then, for every origin but pending, with L what the objects hold now:
//
//	| L against A and the newest                  | then                                                   |
//	|---------------------------------------------|--------------------------------------------------------|
//	| L = A                                       | nothing                                                |
//	| L ≠ A, the last edit less than Settle ago   | wait                                                   |
//	| L ≠ A, the newest was made with L           | A = L (a deploy of config and template together)       |
//	| L ≠ A, otherwise                            | write config-hash (back to a revision made with L, or  |
//	|                                             | a new value); record what it was written for; A = L.   |
//	|                                             | Another field manager owns the annotation: its value   |
//	|                                             | one we wrote (a rollback copied it), take it back      |
//	|                                             | (forced, conditional on the resourceVersion read);     |
//	|                                             | else Warning ConfigTriggerOverruled, A = L, no write   |
func (c *Controller) decide(ctx context.Context, l *look) (reconcile.Result, error) {
	log := logging.FromContext(ctx)
	w, rec, live, newest := l.w, l.rec, l.live, l.revs[0]
	for _, o := range l.objs {
		if _, ok := c.snapshotContent(ctx, newest, o); l.pinned[o.key()] && !ok {
			return reconcile.Result{RequeueAfter: waitAgain}, nil // the pinning controller is taking it
		}
	}
	from := c.origin(ctx, l)
	c.notePending(w.Key(), from == pending)
	madeWith := c.revisionContent(ctx, newest, l.objs, l.pinned, rec)
	ack := &rec.Acknowledged
	switch from {
	case pending:
		return reconcile.Result{RequeueAfter: waitAgain}, nil
	case firstSight:
		for k, v := range live {
			if _, ok := madeWith[k]; !ok {
				madeWith[k] = v // what the objects hold now: nothing better is known
			}
		}
		base := maps.Clone(live)
		if c.sawChange(w.Key()) {
			maps.Copy(base, madeWith) // followed while an edit came: it counts
		}
		rec.Revisions[newest.UID] = unpinned(madeWith, l.pinned)
		*ack = acknowledged{Revision: newest.UID, Content: base}
	case byUs:
		for k, v := range ack.Content {
			if _, pinnedKnown := madeWith[k]; !l.pinned[k] || !pinnedKnown {
				madeWith[k] = v // what we wrote it for; a pinned object's snapshot is what its pods read
			}
		}
	case madeSince:
		after := c.changedAfter(w.Key(), newest.UID)
		for k, v := range live {
			if _, ok := madeWith[k]; ok {
				continue
			}
			if was, known := ack.Content[k]; after && known {
				madeWith[k] = was // an edit reached us after the revision appeared: it was made without it
			} else {
				madeWith[k] = v
			}
		}
		rec.Revisions[newest.UID] = unpinned(madeWith, l.pinned)
		*ack = acknowledged{Revision: newest.UID, Content: maps.Clone(madeWith)}
	case older:
		if _, known := rec.Revisions[newest.UID]; !known {
			rec.Revisions[newest.UID] = unpinned(madeWith, l.pinned)
		}
		if c.changedAfter(w.Key(), newest.UID) {
			ack.Revision, ack.Wrote = newest.UID, nil // edited after it came back: that edit is a change
			break
		}
		c.overruled(w, newest, live, madeWith)
		*ack = acknowledged{Revision: newest.UID, Content: maps.Clone(live)}
		log.Debug("an older revision is the newest again", "revision", newest.Name, "content", live)
		return reconcile.Result{}, nil
	}
	log.Debug("newest revision", "revision", newest.Name, "origin", string(from), "made with", madeWith)

	var changed []string
	for k, v := range live {
		was, known := ack.Content[k]
		if !known {
			ack.Content[k] = v // newly followed: its content is where we start from
			continue
		}
		if was != v {
			changed = append(changed, k)
		}
	}
	if len(changed) == 0 {
		return reconcile.Result{}, nil
	}
	sort.Strings(changed)
	if s := c.since(w.Key()); s < c.opts.Settle {
		log.Debug("changed, settling", "changed", changed, "wait", c.opts.Settle-s)
		return reconcile.Result{RequeueAfter: c.opts.Settle - s}, nil
	}
	if sameContent(madeWith, live) {
		log.Debug("changed, and the newest revision was made with it", "changed", changed, "revision", newest.Name)
		ack.Content = maps.Clone(live) // a deploy of config and template together
		return reconcile.Result{}, nil
	}
	return c.start(ctx, l, changed, madeWith)
}

// origin classifies the newest revision (see decide). Our last write, once its revision is known and
// a newer one came, is recorded as made with what we wrote it for.
func (c *Controller) origin(ctx context.Context, l *look) origin {
	rec, newest := l.rec, l.revs[0]
	ack := &rec.Acknowledged
	if wr := ack.Wrote; wr != nil {
		switch r := wr.made(l.revs); {
		case r != nil && r.UID == newest.UID:
			return byUs
		case r != nil:
			rec.resolveWrote(l.revs) // a newer one since: classified below
		case newest.UID == ack.Revision && templateCarries(l.tmpl, wr) && c.pendingFor(l.w.Key()) < pendingPatience:
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
	for _, r := range l.revs {
		if r.UID == ack.Revision {
			if newest.CreationTimestamp.Before(&r.CreationTimestamp) {
				return older
			}
			return madeSince
		}
	}
	// The acknowledged revision is gone (pruned): made since, unless made with other content than
	// acknowledged then (an older revision, not known to the record).
	made := c.revisionContent(ctx, newest, l.objs, l.pinned, rec)
	for k, v := range made {
		if was, ok := ack.Content[k]; ok && was != v {
			return older
		}
	}
	return madeSince
}

// pendingPatience is how long a write of ours may wait for the revision it makes to become the newest
// (a cache behind, a controller slow to catch up) before it counts as undone: the trigger must never
// stop looking at a workload for good.
const pendingPatience = time.Minute

// templateCarries reports whether the pod template still carries what our write put there.
func templateCarries(tmpl *caches.User, wr *wrote) bool {
	if wr.Set {
		return carries(tmpl, wr.Value)
	}
	_, has := tmpl.TemplateAnnotations[api.ConfigHashAnnotation]
	return !has
}

// start writes config-hash for the live content: back to a revision made with it, or a new value.
func (c *Controller) start(ctx context.Context, l *look, changed []string, madeWith map[string]string) (reconcile.Result, error) {
	log := logging.FromContext(ctx)
	w, rec, live, newest := l.w, l.rec, l.live, l.revs[0]
	contentOf := func(r *caches.User) map[string]string {
		if r.UID == newest.UID {
			return madeWith
		}
		return c.revisionContent(ctx, r, l.objs, l.pinned, rec)
	}
	p, cur, err := planFor(ctx, c.kube, c.dynamic, w, l.revs, live, contentOf)
	if err != nil {
		return reconcile.Result{}, err
	}
	h := holderOf(w)
	what := strings.Join(changed, ", ")
	var takenFrom []string
	if len(cur.owners) > 0 {
		if _, wroteIt := rec.Written[cur.value]; !cur.has || !wroteIt {
			c.tell(w, ReasonOverruled, "%s changed, but %s=%q on the pod template of %s was set by %s, not by configmap-attacher: "+
				"not written, so no revision starts; the next change of the config tries again. To hand it back, remove the annotation "+
				"from the template (or let a deploy of your manifests remove it)",
				what, api.ConfigHashAnnotation, cur.value, h, strings.Join(cur.owners, ", "))
			c.countOverruled(w)
			rec.Acknowledged.Content = maps.Clone(live)
			return reconcile.Result{}, nil
		}
		takenFrom = cur.owners
	}
	if err := c.write(ctx, h, p, cur, takenFrom != nil); err != nil {
		return reconcile.Result{}, err
	}
	if takenFrom != nil {
		c.event(w, ReasonTakenBack, "%s on the pod template of %s held %s, a value configmap-attacher wrote, under %s (a rollback copies it): "+
			"taken back (resourceVersion %s) to start the revision for %s", api.ConfigHashAnnotation, h, cur.value, strings.Join(takenFrom, ", "), cur.rv, what)
	}
	c.untell(w, ReasonOverruled, "")
	rec.resolveWrote(l.revs)
	if _, ok := rec.Revisions[newest.UID]; !ok {
		rec.Revisions[newest.UID] = unpinned(madeWith, l.pinned)
	}
	wr := &wrote{Value: p.value, Set: p.set, After: newest.Number}
	if p.back != nil {
		wr.Back = p.back.UID
	}
	if p.set {
		rec.Written[p.value] = maps.Clone(live)
	}
	rec.Acknowledged = acknowledged{Revision: newest.UID, Wrote: wr, Content: maps.Clone(live)}
	note := c.unpinnedNote(w, l, changed)
	if p.back != nil {
		log.Info("config reverted: back to an existing revision", "changed", changed, "revision", p.back.Name)
		c.event(w, ReasonBack, "%s changed back: %s set to %s on the pod template of %s, which goes back to %s (revision %d), created with this content%s",
			what, api.ConfigHashAnnotation, valueOrRemoved(p), h, p.back.Name, p.back.Number, note)
	} else {
		log.Info("config changed: a new revision starts", "changed", changed, api.ConfigHashAnnotation, p.value)
		c.event(w, ReasonStarted, "%s changed: %s=%s written on the pod template of %s; a new revision starts%s",
			what, api.ConfigHashAnnotation, p.value, h, note)
	}
	if c.metrics != nil {
		c.metrics.RevisionStarted(string(w.Kind()), p.back != nil)
	}
	return reconcile.Result{}, nil
}

// unpinnedNote is what a change's Event adds for the changed objects no snapshot pins (the standing
// Warning ConfigNotPinned names the fix).
func (c *Controller) unpinnedNote(w *caches.User, l *look, changed []string) string {
	var names []string
	for _, o := range l.objs {
		if o.read && !l.pinned[o.key()] && containsString(changed, o.key()) {
			names = append(names, objectKey(o.kind, o.meta.Name, nil))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf(" (not pinned: %s; pods of older revisions that start from now on read the new content, see %s)", strings.Join(names, ", "), ReasonUnpinned)
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// resolveWrote records the revision our last write made, once it appeared, as made with what we
// wrote it for, and acknowledges it.
func (r *record) resolveWrote(revs []*caches.User) {
	wr := r.Acknowledged.Wrote
	if wr == nil {
		return
	}
	made := wr.made(revs)
	if made == nil {
		return
	}
	if _, known := r.Revisions[made.UID]; !known && wr.Back == "" {
		r.Revisions[made.UID] = maps.Clone(r.Written[wr.Value])
	}
	r.Acknowledged.Revision, r.Acknowledged.Wrote = made.UID, nil
}

func valueOrRemoved(p plan) string {
	if p.set {
		return p.value
	}
	return "removed"
}

// overruled reports that the newest revision does not run the live content though no content changed
// since we last looked: the template was changed back (a tool reverting our annotation, `kubectl
// apply` of an older manifest, a rollback). We do not write it again: the next change of the config does.
func (c *Controller) overruled(w *caches.User, newest *caches.User, live, made map[string]string) {
	var differ []string
	for k, v := range live {
		if m, ok := made[k]; ok && m != v {
			differ = append(differ, k)
		}
	}
	if len(differ) == 0 {
		return // made with what the objects hold (as far as known): nothing was undone
	}
	sort.Strings(differ)
	if c.tell(w, ReasonOverruled, "the pod template changed to revision %s (%d), created with other content of %s than it holds now: "+
		"someone changed the template back (a rollback, or a tool reverting %s). Not written again, so no revision starts; "+
		"the next change of the config starts one", newest.Name, newest.Number, strings.Join(differ, ", "), api.ConfigHashAnnotation) {
		c.countOverruled(w)
	}
}

func (c *Controller) countOverruled(w *caches.User) {
	if c.metrics != nil {
		c.metrics.Overruled(string(w.Kind()))
	}
}
