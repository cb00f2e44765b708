package trigger

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
)

// The writer: what decide's steps call for, carried out.

// start writes config-hash for the live content: back to a revision made with it, or a new value.
func (c *Controller) start(ctx context.Context, l *look, from origin, s step, madeWith map[string]string) (reconcile.Result, error) {
	log := logging.FromContext(ctx)
	changed := s.changed
	w, rec, live, newest := l.w, l.rec, l.live, l.revs[0]
	contentOf := func(r *caches.User) map[string]string {
		if r.UID == newest.UID {
			return madeWith
		}
		return c.revisionContent(ctx, r, l.objs, l.pinned, rec, l.kv)
	}
	p, cur, err := planFor(ctx, c.kube, c.dynamic, w, l.revs, live, contentOf)
	if err != nil {
		return reconcile.Result{}, err
	}
	h := holderOf(w)
	what := strings.Join(changed, ", ")
	takeBack, refuse := ownership(cur.owners, cur.has, cur.value, rec.Values)
	if refuse {
		c.tell(w, ReasonOverruled, "%s changed, but %s=%q on the pod template of %s was set by %s, not by configmap-attacher: "+
			"not written, so no revision starts, for this change nor for any later one while it stays. To hand it back, remove the "+
			"annotation from the template (or let a deploy of your manifests remove it); the next change after that starts a revision",
			what, api.ConfigHashAnnotation, cur.value, h, strings.Join(cur.owners, ", "))
		c.countOverruled(w)
		acknowledge(rec, from, newest, s.acked) // the next change tries again
		return reconcile.Result{}, nil
	}
	if err := c.write(ctx, h, p, cur, takeBack); err != nil {
		return reconcile.Result{}, err
	}
	if takeBack {
		c.event(w, ReasonTakenBack, "%s on the pod template of %s held %s, a value configmap-attacher wrote, under %s (a rollback copies it): "+
			"taken back (resourceVersion %s) to start the revision for %s", api.ConfigHashAnnotation, h, cur.value, strings.Join(cur.owners, ", "), cur.rv, what)
	}
	c.untell(w, ReasonOverruled, "")
	rec.resolveWrote(l.revs, l.pinned)
	if _, ok := rec.Revisions[newest.UID]; !ok {
		rec.Revisions[newest.UID] = unpinned(madeWith, l.pinned)
	}
	if p.set {
		rec.Values[p.value] = true
	}
	if p.back != nil && p.back.UID == newest.UID {
		// Our pending write on a paused workload undone: the template is the newest's again.
		rec.Acknowledged = acknowledged{Revision: newest.UID, Content: maps.Clone(live)}
	} else {
		wr := &wrote{Value: p.value, Set: p.set, After: newest.Number}
		if p.back != nil {
			wr.Back = p.back.UID
		}
		rec.Acknowledged = acknowledged{Revision: newest.UID, Wrote: wr, Content: maps.Clone(live)}
	}
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
		if o.read && !o.absent && !l.pinned[o.key()] && containsString(changed, o.key()) {
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

func valueOrRemoved(p plan) string {
	if p.set {
		return p.value
	}
	return "removed"
}

// neverSettled tells that a change was held back by the settle window for -config-max-wait while
// objects kept changing (moving: which, how often): the revision starts with the content of now.
func (c *Controller) neverSettled(w *caches.User, moving map[string]int, held time.Duration) {
	var what []string
	for _, k := range slices.Sorted(maps.Keys(moving)) {
		what = append(what, fmt.Sprintf("%s (%d times)", k, moving[k]))
	}
	if len(what) == 0 {
		what = []string{"the objects it follows"}
	}
	if c.events != nil {
		c.events.Eventf(involved(w), corev1.EventTypeWarning, ReasonNeverSettled, "%s kept changing for %s, more often than -config-settle (%s): "+
			"the change waited -config-max-wait (%s) and a revision of %s starts with the content of this moment. An object rewritten "+
			"that often (a lease, a status) is better left out: reloader.stakater.com/ignore on it, or a reload list naming the others",
			strings.Join(what, ", "), held.Round(time.Second), c.opts.Settle, c.opts.MaxWait, describe(w))
	}
	c.count(c.waitedTooLong, w, "settle")
}

// overruled reports that the newest revision does not run the live content though no content changed
// since it came back: the template was changed back (a tool reverting our annotation, `kubectl apply`
// of an older manifest, a rollback). We do not write it again: the next change of the config does.
func (c *Controller) overruled(w *caches.User, newest *caches.User, differ []string) {
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
