package trigger

import (
	"context"
	"errors"
	"fmt"
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

// waitAgain is how soon a workload is looked at again while its controller, the pinning of its
// newest revision, or the config cache catches up.
const waitAgain = time.Second

// followed is one config object a workload follows, as the cache shows it, and what it reads of it.
type followed struct {
	kind refs.Kind
	meta *metav1.PartialObjectMetadata
	read bool     // the pod template reads it (pinning snapshots only what pods read)
	keys []string // the keys the template reads, nil: the whole object (or not read: a reload list names it)
}

func (f followed) key() string { return objectKey(f.kind, f.meta.Name, f.keys) }

// sync looks at one workload: what it follows, what that holds now, what its newest revision was
// made with; decide does the rest.
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
	tmpl, observed, err := c.template(w)
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
	objs := c.followed(w, sel, tmpl.Reads)
	live := map[string]string{}
	for _, o := range objs {
		h, err := c.content.hash(ctx, o.kind, o.meta, o.keys)
		if errors.Is(err, errCacheBehind) {
			logging.FromContext(ctx).Debug("waiting for the config cache", "err", err)
			return reconcile.Result{RequeueAfter: waitAgain}, nil
		}
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
	rec.learnWritten(revs)
	pinned := c.pinnedOf(w.Namespace, objs)
	before := rec.clone()
	c.warnUnpinned(w, objs, pinned, rec)
	res, err := c.decide(ctx, &look{w: w, tmpl: tmpl, revs: revs, objs: objs, pinned: pinned, live: live, rec: rec})
	if err != nil {
		return res, err
	}
	if !exists && len(live) == 0 && len(rec.Revisions) == 0 {
		return res, nil // follows nothing yet: no record needed
	}
	if !exists || !rec.equal(before) {
		rec.tidy(revs, pinned, tmpl)
		if err := c.records.save(ctx, w, rec, exists); err != nil {
			return reconcile.Result{}, err
		}
	}
	return res, nil
}

// warnUnpinned tells which objects the workload's pods read that no snapshot pins: after a change of
// one, the pods of older revisions that start (a spot replacement, a scale-up, a partitioned
// StatefulSet's) read the new content; and which label fixes that. Once per workload, until that list
// changes (the record keeps it, so a restart does not tell every workload again); each change's own
// Event repeats it.
func (c *Controller) warnUnpinned(w *caches.User, objs []followed, pinned map[string]bool, rec *record) {
	names, fix := unpinnedRead(w, objs, pinned)
	if slices.Equal(names, rec.Unpinned) {
		return
	}
	rec.Unpinned = names
	if len(names) == 0 || c.events == nil {
		return
	}
	if c.caches.Pinning == nil || !c.caches.Pinning.Enabled(w.Namespace) {
		fix = append([]string{fmt.Sprintf("kubectl label namespace %s %s=%s", w.Namespace, api.PinningNamespaceLabel, api.PinningEnabled)}, fix...)
	}
	if c.caches.Pinning == nil {
		fix = append([]string{"run the controller with -pinning (chart: pinning.enabled=true)"}, fix...)
	}
	c.events.Eventf(involved(w), corev1.EventTypeWarning, ReasonUnpinned, "%s not pinned: after a change, pods of older revisions of %s that start "+
		"(a spot replacement, a scale-up) read the new content; fix: %s", strings.Join(names, ", "), describe(w), strings.Join(fix, "; "))
}

// unpinnedRead are the objects the workload's pods read that no snapshot pins, and the label for each.
func unpinnedRead(w *caches.User, objs []followed, pinned map[string]bool) (names, fix []string) {
	for _, o := range objs {
		if pinned[o.key()] || !o.read {
			continue
		}
		names = append(names, objectKey(o.kind, o.meta.Name, nil))
		fix = append(fix, fmt.Sprintf("kubectl -n %s label %s %s %s=%s", w.Namespace, strings.ToLower(string(o.kind)), o.meta.Name, api.PinLabel, api.PinValue))
	}
	return names, fix
}

// template returns the workload holding the pod template (the workload itself, or the Deployment a
// Rollout's workloadRef names), as cached, and whether the workload's controller has caught up with that
// template (its newest revision is then the template's).
func (c *Controller) template(w *caches.User) (*caches.User, bool, error) {
	observed := w.Status != nil && w.Status.Observed
	if w.Status == nil || w.Status.TemplateRef == "" {
		return w, observed, nil
	}
	d, exists, err := c.caches.Users[caches.Deployment].Get(w.Namespace, w.Status.TemplateRef)
	if err != nil {
		return nil, false, err
	}
	if !exists {
		return nil, false, fmt.Errorf("not followed: Deployment %s/%s, which spec.workloadRef names, does not exist; create it or fix the reference",
			w.Namespace, w.Status.TemplateRef)
	}
	return d, observed && w.Status.TemplateRefObserved >= d.Generation, nil
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

// followed lists the config objects the workload follows, with what its template reads of them, and
// tells about named ones that are missing.
func (c *Controller) followed(w *caches.User, sel Selection, reads []refs.Read) []followed {
	var out []followed
	var missing []string
	for _, kind := range refs.Kinds() {
		inf, ok := c.caches.AllConfigs[kind]
		if !ok {
			continue
		}
		seen := map[string]bool{}
		for _, r := range reads {
			if r.Kind != kind {
				continue
			}
			if m, exists, _ := inf.Get(w.Namespace, r.Name); exists && sel.Follows(kind, m, true) {
				out = append(out, followed{kind: kind, meta: m, read: true, keys: r.Keys})
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

// revisionContent is what a revision was made with, per followed object: its snapshot's content for a
// pinned object (what its pods read); for the others the record's, else the snapshot's the revision
// owns from when the object was pinned; objects it does not know are absent.
func (c *Controller) revisionContent(ctx context.Context, r *caches.User, objs []followed, pinned map[string]bool, rec *record) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		k := o.key()
		if !pinned[k] {
			if h, ok := rec.Revisions[r.UID][k]; ok {
				out[k] = h
				continue
			}
		}
		if h, ok := c.snapshotContent(ctx, r, o); ok {
			out[k] = h
		}
	}
	return out
}

// snapshotContent is the content hash of what the workload reads of the snapshot of o that revision r
// owns (its pin), if any: whether the object is pinned now or not, the snapshot holds what r was
// pinned with. A snapshot is the whole object; where the template reads some keys only, their hash
// is read from the snapshot's data (once: a snapshot never changes).
func (c *Controller) snapshotContent(ctx context.Context, r *caches.User, o followed) (string, bool) {
	if c.caches.Pinning == nil {
		return "", false
	}
	snap, ok := c.caches.Pinning.Snapshot(r.Namespace, string(r.UID), refs.Ref{Kind: o.kind, Name: o.meta.Name})
	if !ok {
		return "", false
	}
	if o.keys == nil {
		return content.HashOfName(snap, o.meta.Name)
	}
	h, err := c.content.snapshotKeys(ctx, o.kind, r.Namespace, snap, o.keys)
	if err != nil {
		logging.FromContext(ctx).Debug("reading a snapshot's keys", "snapshot", snap, "err", err)
		return "", false
	}
	return h, true
}
