package trigger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// waitAgain is how soon a workload is looked at again while its controller, or the pinning of its
// newest revision, catches up.
const waitAgain = time.Second

// followed is one config object a workload follows, as the cache shows it.
type followed struct {
	kind refs.Kind
	meta *metav1.PartialObjectMetadata
	read bool // the pod template reads it (pinning snapshots only what pods read)
}

func (f followed) key() string { return objectKey(f.kind, f.meta.Name) }

// sync looks at one workload: records what its newest revision was created with, and starts a
// revision when the content it follows changed since, has settled, and the newest revision does not
// already read it.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	k, ns, name, err := reconcile.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, err
	}
	inf, ok := c.caches.Users[caches.Kind(k)]
	if !ok {
		return reconcile.Result{}, nil
	}
	w, exists, err := inf.Get(ns, name)
	if err != nil || !exists {
		c.forget(key)
		return reconcile.Result{}, err
	}
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("workload", key))
	switch w.Kind() {
	case caches.Pod, caches.Job, caches.CronJob:
		if optedInAnyKind(w) {
			c.tell(w, ReasonInvalid, "Reloader's annotations are not honoured on a %s: configmap-attacher starts revisions of Deployments, "+
				"StatefulSets, DaemonSets and Rollouts only, and never recreates a %s; it keeps reading the config it started with. "+
				"Fix: put the workload under one of those kinds, or remove the annotations", w.TypeMeta.Kind, w.TypeMeta.Kind)
		}
		return reconcile.Result{}, nil
	}
	sel := Select(w)
	for _, msg := range sel.Unsupported {
		c.tellAbout(w, ReasonNotHonoured, strings.SplitN(msg, " ", 2)[0], "%s", msg)
	}
	if !sel.OptedIn() || w.DeletionTimestamp != nil {
		c.forget(key) // opted out: nothing is triggered any more
		return reconcile.Result{}, nil
	}
	if len(sel.Invalid) > 0 {
		c.tell(w, ReasonInvalid, "not followed, nothing is written: %s", strings.Join(sel.Invalid, "; "))
		return reconcile.Result{}, nil
	}
	c.untell(w, ReasonInvalid, "")
	if w.Kind() == caches.Deployment {
		if ros := c.templateUsers(w); len(ros) > 0 {
			c.tell(w, ReasonInvalid, "not followed: Rollout %s takes its pod template from this Deployment (workloadRef); "+
				"put Reloader's annotations on the Rollout, whose revisions they start", ros[0].Name)
			return reconcile.Result{}, nil
		}
	}
	refd, observed, err := c.template(w)
	if err != nil {
		c.tell(w, ReasonInvalid, "%v", err)
		return reconcile.Result{}, nil
	}
	if !observed {
		return reconcile.Result{RequeueAfter: waitAgain}, nil
	}
	revs := c.revisions(w)
	if len(revs) == 0 {
		return reconcile.Result{}, nil // its first revision's creation brings it back
	}
	objs := c.followed(w, sel, refd)
	live := map[string]string{}
	for _, o := range objs {
		h, err := c.content.hash(ctx, o.kind, o.meta)
		if err != nil {
			return reconcile.Result{}, err
		}
		live[o.key()] = h
	}
	rec, exists, err := c.records.load(w)
	if errors.Is(err, errForeign) {
		c.tell(w, ReasonInvalid, "not followed, nothing is written: %v", err)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	before := rec.clone()
	res, err := c.decide(ctx, w, revs, objs, live, rec)
	if err != nil {
		return res, err
	}
	rec.prune(revs)
	if !exists && len(live) == 0 && len(rec.Revisions) == 0 {
		return res, nil // follows nothing yet: no record needed
	}
	if !exists || !rec.equal(before) {
		if err := c.records.save(ctx, w, rec, exists); err != nil {
			return reconcile.Result{}, err
		}
	}
	return res, nil
}

// decide updates the record and starts a revision if one is due.
func (c *Controller) decide(ctx context.Context, w *caches.User, revs []*caches.User, objs []followed, live map[string]string, rec *record) (reconcile.Result, error) {
	log := logging.FromContext(ctx)
	newest := revs[0]
	pinned := c.pinnedOf(w.Namespace, objs)
	contentOf := func(r *caches.User) map[string]string { return c.revisionContent(r, objs, pinned, rec) }

	// First sight of the newest revision: it was created with what the objects hold now (a pinned
	// object's content is its snapshot, which the pinning controller takes; wait for it). A revision
	// that owns a snapshot of an object no longer pinned (its namespace's pinning turned off, its pin
	// label removed) is known by that snapshot: what the object holds now may be a later edit.
	for _, o := range objs {
		if pinned[o.key()] {
			if _, ok := contentOf(newest)[o.key()]; !ok {
				return reconcile.Result{RequeueAfter: waitAgain}, nil
			}
			continue
		}
		if _, ok := rec.Revisions[newest.UID][o.key()]; ok {
			continue
		}
		if _, ok := c.snapshotContent(newest, o); ok {
			continue
		}
		if rec.Revisions[newest.UID] == nil {
			rec.Revisions[newest.UID] = map[string]string{}
		}
		rec.Revisions[newest.UID][o.key()] = live[o.key()]
	}
	switch {
	case rec.Acknowledged.Revision == "":
		// First sight of the workload: opting in starts no revision, so what its objects hold now is
		// where we start from; unless a followed object changed since we watch it following (it was
		// opted in before we got here), in which case the revision's own content is, and that change
		// counts.
		base := maps.Clone(live)
		if c.sawChange(w.Key()) {
			maps.Copy(base, contentOf(newest))
		}
		rec.Acknowledged = acknowledged{Revision: newest.UID, Content: base}
		log.Debug("first sight", "revision", newest.Name, "acknowledged", base)
	case rec.Acknowledged.Revision != newest.UID:
		// A new newest revision: a deploy, our own last write, a rollback, or someone changing the
		// template back. Only a content change from here on starts a revision.
		created := contentOf(newest)
		if !sameContent(created, live) && madeSince(newest, revs, rec.Acknowledged, created) {
			// Made since our last look, and an edit came after it, before this look (a loaded
			// controller, an edit right after a deploy or our own write): the edit is a change since
			// the revision appeared, counted from what it was created with, not the template changed back.
			rec.Acknowledged = acknowledged{Revision: newest.UID, Content: maps.Clone(created)}
			log.Debug("newest revision acknowledged, edited since", "revision", newest.Name, "created", created, "content", live)
			break
		}
		if !sameContent(created, live) {
			c.overruled(w, newest, live, created)
		}
		rec.Acknowledged = acknowledged{Revision: newest.UID, Content: maps.Clone(live)}
		log.Debug("newest revision acknowledged", "revision", newest.Name, "content", live)
		return reconcile.Result{}, nil
	}
	var changed []string
	for k, v := range live {
		was, known := rec.Acknowledged.Content[k]
		if !known {
			rec.Acknowledged.Content[k] = v // newly followed: its content is where we start from
			continue
		}
		if was != v {
			changed = append(changed, k)
		}
	}
	if len(changed) == 0 {
		log.Debug("no change since the newest revision appeared", "revision", newest.Name, "content", live)
		return reconcile.Result{}, nil
	}
	if s := c.since(w.Key()); s < c.opts.Settle {
		log.Debug("changed, settling", "changed", changed, "wait", c.opts.Settle-s)
		return reconcile.Result{RequeueAfter: c.opts.Settle - s}, nil
	}
	if sameContent(contentOf(newest), live) {
		log.Debug("changed, and the newest revision already runs it", "changed", changed, "revision", newest.Name)
		rec.Acknowledged.Content = maps.Clone(live) // already deployed with it (e.g. config and template together)
		return reconcile.Result{}, nil
	}
	sort.Strings(changed)
	p, err := planFor(ctx, c.kube, c.dynamic, w, revs, live, contentOf)
	if err != nil {
		return reconcile.Result{}, err
	}
	h := holderOf(w)
	err = c.write(ctx, h, p)
	if errors.Is(err, errOwnedElsewhere) {
		c.tell(w, ReasonOverruled, "%s changed, but %s on the pod template of %s belongs to another field manager "+
			"(it set or changed it): not written, so no revision starts; the next change of the config tries again. %v",
			strings.Join(changed, ", "), api.ConfigHashAnnotation, h, err)
		c.countOverruled(w)
		rec.Acknowledged.Content = maps.Clone(live)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	c.untell(w, ReasonOverruled, "")
	rec.Acknowledged.Content = maps.Clone(live)
	if p.back != nil {
		log.Info("config reverted: back to an existing revision", "changed", changed, "revision", p.back.Name)
		c.event(w, ReasonBack, "%s changed back: %s set to %s on the pod template of %s, which goes back to %s (revision %d), created with this content",
			strings.Join(changed, ", "), api.ConfigHashAnnotation, valueOrRemoved(p), h, p.back.Name, p.back.Number)
	} else {
		log.Info("config changed: a new revision starts", "changed", changed, api.ConfigHashAnnotation, p.value)
		c.event(w, ReasonStarted, "%s changed: %s=%s written on the pod template of %s; a new revision starts",
			strings.Join(changed, ", "), api.ConfigHashAnnotation, p.value, h)
	}
	if c.metrics != nil {
		c.metrics.RevisionStarted(string(w.Kind()), p.back != nil)
	}
	c.warnUnpinned(w, objs, changed, pinned)
	return reconcile.Result{}, nil
}

// madeSince reports whether the newest revision is one made since the acknowledged one, not one
// reused by a rollback: created no earlier than it (whole seconds: the same second counts as made
// since, a rollback to a revision made within a second of its successor is no rollback anyone runs),
// or, the acknowledged one gone, created with the content acknowledged then.
func madeSince(newest *caches.User, revs []*caches.User, ack acknowledged, created map[string]string) bool {
	for _, r := range revs {
		if r.UID == ack.Revision {
			return !newest.CreationTimestamp.Before(&r.CreationTimestamp)
		}
	}
	return sameContent(created, ack.Content)
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
func (c *Controller) overruled(w *caches.User, newest *caches.User, live, created map[string]string) {
	var differ []string
	for k, v := range live {
		if created[k] != v {
			differ = append(differ, k)
		}
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

// warnUnpinned tells, for the changed objects no snapshot pins, that the pods of older revisions
// starting from now on (a spot replacement, a scale-up, a partitioned StatefulSet's) read the new
// content, and which label fixes that.
func (c *Controller) warnUnpinned(w *caches.User, objs []followed, changed []string, pinned map[string]bool) {
	var fix []string
	for _, o := range objs {
		if !slices.Contains(changed, o.key()) || pinned[o.key()] || !o.read {
			continue
		}
		fix = append(fix, fmt.Sprintf("kubectl -n %s label %s %s %s=%s", w.Namespace, strings.ToLower(string(o.kind)), o.meta.Name, api.PinLabel, api.PinValue))
	}
	if len(fix) == 0 {
		return
	}
	if c.caches.Pinning == nil || !c.caches.Pinning.Enabled(w.Namespace) {
		fix = append([]string{fmt.Sprintf("kubectl label namespace %s %s=%s", w.Namespace, api.PinningNamespaceLabel, api.PinningEnabled)}, fix...)
	}
	if c.events != nil { // once per change: each is news
		c.events.Eventf(involved(w), corev1.EventTypeWarning, ReasonUnpinned, "pods of older revisions of %s that start from now on read the new content (it is not pinned); fix: %s",
			describe(w), strings.Join(fix, "; "))
	}
}

// template returns the config objects the workload's pod template reads and whether its controller
// has caught up with that template (its newest revision is then the template's).
func (c *Controller) template(w *caches.User) ([]refs.Ref, bool, error) {
	observed := w.Status != nil && w.Status.Observed
	if w.Status == nil || w.Status.TemplateRef == "" {
		return w.Refs, observed, nil
	}
	d, exists, err := c.caches.Users[caches.Deployment].Get(w.Namespace, w.Status.TemplateRef)
	if err != nil {
		return nil, false, err
	}
	if !exists {
		return nil, false, fmt.Errorf("not followed: Deployment %s/%s, which spec.workloadRef names, does not exist; create it or fix the reference",
			w.Namespace, w.Status.TemplateRef)
	}
	return d.Refs, observed && w.Status.TemplateRefObserved >= d.Generation, nil
}

// templateUsers are the Rollouts taking their template from Deployment d.
func (c *Controller) templateUsers(d *caches.User) []*caches.User {
	inf, ok := c.caches.Users[caches.Rollout]
	if !ok {
		return nil
	}
	ros, _ := inf.ByIndex(caches.ByTemplateRef, d.Namespace+"/"+d.Name)
	return ros
}

// revisions are the workload's revisions not being deleted, newest (highest number) first: a
// rollback renumbers the revision it reuses, so the newest is the one its template makes.
func (c *Controller) revisions(w *caches.User) []*caches.User {
	kind := caches.ReplicaSet
	if w.Kind() == caches.StatefulSet || w.Kind() == caches.DaemonSet {
		kind = caches.ControllerRevision
	}
	inf, ok := c.caches.Users[kind]
	if !ok {
		return nil
	}
	all, _ := inf.InNamespace(w.Namespace, caches.ControlledBy(w.UID))
	var out []*caches.User
	for _, r := range all {
		if r.DeletionTimestamp == nil {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Number != out[j].Number {
			return out[i].Number > out[j].Number
		}
		return out[i].CreationTimestamp.After(out[j].CreationTimestamp.Time)
	})
	return out
}

// followed lists the config objects the workload follows, and tells about named ones that are missing.
func (c *Controller) followed(w *caches.User, sel Selection, refd []refs.Ref) []followed {
	var out []followed
	var missing []string
	for _, kind := range refs.Kinds() {
		inf, ok := c.caches.AllConfigs[kind]
		if !ok {
			continue
		}
		seen := map[string]bool{}
		for _, r := range refd {
			if r.Kind != kind {
				continue
			}
			if m, exists, _ := inf.Get(w.Namespace, r.Name); exists && sel.Follows(kind, m, true) {
				out = append(out, followed{kind: kind, meta: m, read: true})
				seen[r.Name] = true
			}
		}
		if sel.kinds[kind] == nil || len(sel.kinds[kind].reload) == 0 {
			continue
		}
		objs, _ := inf.ByIndex(cache.NamespaceIndex, w.Namespace) // the informer factories' own index
		for _, m := range objs {
			if !seen[m.Name] && sel.Follows(kind, m, false) {
				out = append(out, followed{kind: kind, meta: m})
				seen[m.Name] = true
			}
		}
		for _, n := range sel.Named(kind) {
			if !seen[n] {
				missing = append(missing, fmt.Sprintf("%s %s", kind, n))
			}
		}
	}
	if len(missing) > 0 {
		c.tellAbout(w, ReasonInvalid, "missing", "the reload list names %s, which does not exist in namespace %s: its changes cannot start a revision "+
			"until it exists; create it or remove the name from the annotation", strings.Join(missing, ", "), w.Namespace)
	} else {
		c.untell(w, ReasonInvalid, "missing")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// pinnedOf says which followed objects each revision's snapshots pin: labelled for pinning, in a
// namespace with pinning on, and read by the pod template.
func (c *Controller) pinnedOf(ns string, objs []followed) map[string]bool {
	out := map[string]bool{}
	if c.caches.Pinning == nil || !c.caches.Pinning.Enabled(ns) {
		return out
	}
	for _, o := range objs {
		out[o.key()] = o.read && api.Pinned(o.meta.Labels)
	}
	return out
}

// revisionContent is what a revision was created with, per followed object: its snapshot's content
// for a pinned object (what its pods read); for the others the record's, else the snapshot's the
// revision owns from when the object was pinned; objects it does not know are absent.
func (c *Controller) revisionContent(r *caches.User, objs []followed, pinned map[string]bool, rec *record) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		k := o.key()
		if !pinned[k] {
			if h, ok := rec.Revisions[r.UID][k]; ok {
				out[k] = h
				continue
			}
		}
		if h, ok := c.snapshotContent(r, o); ok {
			out[k] = h
		}
	}
	return out
}

// snapshotContent is the content hash of the snapshot of o that revision r owns (its pin), if any:
// whether the object is pinned now or not, the snapshot holds what r was pinned with.
func (c *Controller) snapshotContent(r *caches.User, o followed) (string, bool) {
	if c.caches.Pinning == nil {
		return "", false
	}
	snap, ok := c.caches.Pinning.Snapshot(r.Namespace, string(r.UID), refs.Ref{Kind: o.kind, Name: o.meta.Name})
	if !ok {
		return "", false
	}
	return content.HashOfName(snap, o.meta.Name)
}

// prune drops what the record holds of revisions that are gone.
func (r *record) prune(revs []*caches.User) {
	for uid := range r.Revisions {
		if !slices.ContainsFunc(revs, func(u *caches.User) bool { return u.UID == uid }) {
			delete(r.Revisions, uid)
		}
	}
}
