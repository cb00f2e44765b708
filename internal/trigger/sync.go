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
	"k8s.io/apimachinery/pkg/util/resourceversion"
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

// recordRetry is how soon a record that could not be written is tried again (the quota lifted, the
// policy changed) when nothing else brings its workload back.
const recordRetry = time.Minute

// followed is one config object a workload follows, as the cache shows it, and what it reads of it.
type followed struct {
	kind refs.Kind
	meta *metav1.PartialObjectMetadata
	read bool     // the pod template reads it (pinning snapshots only what pods read)
	keys []string // the keys the template reads, nil: the whole object (or not read: a reload list names it)
	// dataOnly: the template reads it through the environment alone (a ConfigMap's binaryData is not
	// read); optional: through optional references alone.
	dataOnly, optional bool
	// absent: an object the template reads as optional that does not exist (meta holds its name).
	absent bool
}

func (f followed) key() string { return objectKey(f.kind, f.meta.Name, f.keys) }

// ref names the object itself, whatever is read of it: "Kind/name".
func (f followed) ref() string { return refs.Ref{Kind: f.kind, Name: f.meta.Name}.String() }

// look is what one sync read of a workload.
type look struct {
	w      *caches.User
	tmpl   *caches.User   // the workload holding the pod template, as cached
	revs   []*caches.User // its revisions, newest first
	objs   []followed
	pinned map[string]bool
	live   map[string]string // what the objects hold now: objectKey -> content hash
	rvs    map[string]string // the version of each object: objectKey -> resourceVersion
	rec    *record
	kv     keyVersion // the key Secret contents are hashed with in this look (the record's, key or not)
}

// sync looks at one workload: what it follows, what that holds now, what its newest revision was
// made with; decide says what to do, and sync does it.
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
		c.tellOptedOut(w)
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
	st := c.stateFor(w)
	rec, srv, err := c.load(w, st)
	if err != nil {
		return reconcile.Result{}, err
	}
	c.noteFollowed(st, objs, rec)
	kv, keyErr := c.keyFor(ctx, objs, rec)
	live, rvs, heldBack, err := c.liveContent(ctx, objs, rec, kv)
	if errors.Is(err, errCacheBehind) {
		logging.FromContext(ctx).Debug("waiting for the config cache", "err", err)
		return reconcile.Result{RequeueAfter: waitAgain}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(heldBack) > 0 {
		return c.holdBack(w, st, heldBack, keyErr), nil
	}
	c.release(w, st, keyErr != nil)
	if err := c.carryOver(ctx, w, rec, revs, objs, live, kv); err != nil {
		return reconcile.Result{}, err
	}
	before, err := rec.encode()
	if err != nil {
		return reconcile.Result{}, err
	}
	l := &look{w: w, tmpl: tmpl, revs: revs, objs: objs, pinned: c.pinnedOf(w.Namespace, objs), live: live, rvs: rvs, rec: rec, kv: kv}
	c.warnUnpinned(w, objs, l.pinned, rec)
	res, err := c.decideAndAct(ctx, l, st)
	if err != nil {
		return res, err
	}
	after, err := rec.encode()
	if err != nil {
		return reconcile.Result{}, err
	}
	if !srv.exists && len(live) == 0 && len(rec.Revisions) == 0 {
		return res, nil // follows nothing yet: no record needed
	}
	if after == before && srv.holds(before) {
		c.keep(st, rec, before, srv.rv)
		return res, nil
	}
	rec.tidy(revs, l.pinned, tmpl)
	rec.noteVersions(live, rvs) // with a write made anyway: a version changing alone costs none
	text, err := rec.fit(revs)
	if err != nil {
		return reconcile.Result{}, err
	}
	c.keep(st, rec, text, srv.rv) // decided: what the next sync starts from, written or not
	if srv.holds(text) {
		return res, nil
	}
	if why := srv.notOurs(); why != "" {
		c.notKept(w, why)
		return requeueWithin(res, recordRetry), nil
	}
	rv, err := c.records.save(ctx, w, text, srv)
	switch {
	case err == nil:
		c.keep(st, rec, text, rv)
		c.untell(w, ReasonRecordNotKept, "")
	case retried(err):
		return reconcile.Result{}, err
	default:
		c.notKept(w, err.Error())
		return requeueWithin(res, recordRetry), nil
	}
	return res, nil
}

// noteFollowed notes, for each object newly followed (a workload past its first sight whose
// acknowledged content does not know it), the version the cache shows in the first look that follows
// it, before that look reads any content: a look cut short (the cache behind the API server, the hash
// key not readable) must not let an edit made meanwhile pass for where the object starts from. What
// the acknowledged content knows, or the workload no longer follows, is forgotten.
func (c *Controller) noteFollowed(st *workloadState, objs []followed, rec *record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	following := map[string]bool{}
	for _, o := range objs {
		k := o.key()
		following[k] = true
		if _, known := rec.Acknowledged.Content[k]; known || rec.Acknowledged.Revision == "" {
			continue
		}
		if _, noted := st.followedAt[k]; !noted {
			if st.followedAt == nil {
				st.followedAt = map[string]string{}
			}
			st.followedAt[k] = o.meta.ResourceVersion // "" for an optional object that does not exist
		}
	}
	for k := range st.followedAt {
		if _, known := rec.Acknowledged.Content[k]; known || !following[k] {
			delete(st.followedAt, k)
		}
	}
}

// startsFrom is, for each newly followed object no longer at the version noted as its follow began,
// what it held then: the hash this process took of that version, else unknown (errs toward a
// revision). An object still at that version starts from what it holds (decide).
func (c *Controller) startsFrom(st *workloadState, objs []followed, kv keyVersion) map[string]string {
	c.mu.Lock()
	noted := maps.Clone(st.followedAt)
	c.mu.Unlock()
	out := map[string]string{}
	for _, o := range objs {
		at, ok := noted[o.key()]
		switch {
		case !ok || at == o.meta.ResourceVersion:
		case at == "":
			out[o.key()] = absentContent
		default:
			h, known := c.content.earlier(o, at, kv)
			if !known {
				h = unknownContent
			}
			out[o.key()] = h
		}
	}
	return out
}

// holds reports whether the record on the API server holds text (and is the workload's own).
func (s onServer) holds(text string) bool {
	return s.exists && !s.previous && s.notOurs() == "" && s.text == text
}

// notOurs says why the record on the API server is not one to write ("": it is, or there is none).
func (s onServer) notOurs() string {
	switch {
	case s.foreign != "":
		return s.foreign
	case s.unknown != "":
		return s.unknown
	}
	return ""
}

func requeueWithin(res reconcile.Result, d time.Duration) reconcile.Result {
	if res.RequeueAfter == 0 || res.RequeueAfter > d {
		res.RequeueAfter = d
	}
	return res
}

// keyFor is the key Secret contents are hashed with in this look: the current one, when the workload
// follows a Secret; while that cannot be read (the error said), the record's, held by this process or
// known by its id alone (liveContent then knows a Secret by the record's versions, or not at all).
func (c *Controller) keyFor(ctx context.Context, objs []followed, rec *record) (keyVersion, error) {
	if !slices.ContainsFunc(objs, func(o followed) bool { return o.kind == refs.Secret }) {
		return keyVersion{}, nil
	}
	kv, err := c.key.current(ctx)
	if err == nil {
		return kv, nil
	}
	if held, ok := c.key.held(rec.Key); ok {
		return held, err
	}
	return keyVersion{id: rec.Key}, err
}

// liveContent is what the objects hold now (objectKey -> content hash) and their versions. A Secret
// that cannot be hashed for want of the key is known by the record while it is at the version the
// record noted with the acknowledged content (made with that key); held back otherwise (heldBack).
func (c *Controller) liveContent(ctx context.Context, objs []followed, rec *record, kv keyVersion) (live, rvs map[string]string, heldBack []string, err error) {
	live, rvs = map[string]string{}, map[string]string{}
	for _, o := range objs {
		k := o.key()
		rvs[k] = o.meta.ResourceVersion
		h, err := c.content.hash(ctx, o, kv)
		if errors.Is(err, errKeyUnavailable) {
			if v := rec.Versions[k]; v != "" && v == o.meta.ResourceVersion && rec.Key == kv.id {
				live[k] = rec.Acknowledged.Content[k]
				continue
			}
			heldBack = append(heldBack, k)
			continue
		}
		if err != nil {
			return nil, nil, nil, err
		}
		live[k] = h
	}
	return live, rvs, heldBack, nil
}

// holdBack tells that the workload waits for the hash key to know what Secrets it reads hold, and
// looks again with a back-off (the key's arrival brings it back at once). The moment before the key
// watch's first list is not told.
func (c *Controller) holdBack(w *caches.User, st *workloadState, secrets []string, why error) reconcile.Result {
	if !errors.Is(why, errKeyNotListed) && c.tell(w, ReasonKeyUnreadable, "%s changed while the config trigger's hash key cannot be read (%v): held back, no revision starts for "+
		"any change of this workload until the key is read; workloads reading ConfigMaps alone, or Secrets unchanged since, go on. "+
		"Fix: let the controller read (get, list, watch) and create Secret %s", strings.Join(secrets, ", "), why, c.key.ref) {
		c.count(c.heldBackTotal, w)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heldBack[w.Key()] = true
	st.backoff = min(max(2*st.backoff, waitAgain), recordRetry)
	return reconcile.Result{RequeueAfter: st.backoff}
}

// release ends a hold for the key. awaitKey: the look was decided without the key, in the record's
// key space (the Secrets it reads unchanged): the key's arrival brings the workload back all the same,
// to carry its record over to the key while the versions it noted still tell.
func (c *Controller) release(w *caches.User, st *workloadState, awaitKey bool) {
	c.untell(w, ReasonKeyUnreadable, "")
	c.mu.Lock()
	defer c.mu.Unlock()
	if awaitKey {
		c.heldBack[w.Key()] = true
	} else {
		delete(c.heldBack, w.Key())
	}
	st.backoff = 0
}

// enqueueHeldBack brings back every workload held back for the key: it can be read now.
func (c *Controller) enqueueHeldBack() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.heldBack {
		c.loop.Queue.Add(k)
	}
}

// decideAndAct gathers the facts of the decision, takes it (decide.go's rules), and carries its step
// out: the record, the Events, the write.
func (c *Controller) decideAndAct(ctx context.Context, l *look, st *workloadState) (reconcile.Result, error) {
	log := logging.FromContext(ctx)
	w, rec, newest, now := l.w, l.rec, l.revs[0], c.now()
	clk := c.tick(st, l.live)
	snaps, missing := map[string]string{}, []string{}
	for _, o := range l.objs {
		h, ok := c.snapshotContent(ctx, newest, o, l.kv)
		if ok {
			snaps[o.key()] = h
		} else if l.pinned[o.key()] {
			missing = append(missing, o.key())
		}
	}
	waitSnap, after, gaveUp := snapshotWait(len(missing) > 0, c.snapshotWaited(st, len(missing) > 0), c.opts.MaxWait)
	if waitSnap {
		return reconcile.Result{RequeueAfter: after}, nil // the pinning controller is taking it
	}
	if gaveUp {
		if c.tellAbout(w, ReasonSnapshotMissing, string(newest.UID), "revision %s of %s has no snapshot of %s after %s (-config-max-wait): decided without it, "+
			"from the record and what the objects held when the revision appeared. Is the pinning controller running, and the namespace labelled %s=%s?",
			newest.Name, describe(w), strings.Join(missing, ", "), c.opts.MaxWait, api.PinningNamespaceLabel, api.PinningEnabled) {
			c.count(c.waitedTooLong, w, "snapshot")
		}
	}

	paused := w.Status != nil && w.Status.Paused
	cf := classFacts{rec: rec, revs: l.revs, tmpl: l.tmpl, waited: c.waited(st), paused: paused}
	if a := rec.Acknowledged.Revision; a != "" && !slices.ContainsFunc(l.revs, func(r *caches.User) bool { return r.UID == a }) {
		cf.prunedDiffers = len(differs(rec.Acknowledged.Content, c.revisionContent(ctx, newest, l.objs, l.pinned, rec, l.kv))) > 0
	}
	from, change := classify(cf)
	switch change {
	case ackResolved:
		rec.resolveWrote(l.revs, l.pinned)
	case ackDropped:
		rec.Acknowledged.Wrote = nil
	}
	c.notePending(st, from == pending)

	liveHash, err := content.HashJSON(l.live)
	if err != nil {
		return reconcile.Result{}, err
	}
	value, carried := newest.TemplateAnnotations[api.ConfigHashAnnotation]
	valueFits := carried && writtenFor(value, rec.Values, liveHash)
	app, noted := c.appearanceOf(newest.UID)
	seen, made := map[string]string{}, map[string]string{}
	for _, o := range l.objs {
		of := c.factsOf(o, l, snaps, app, noted)
		seen[of.key] = seenAt(of, valueFits)
		if m, ok := madeWith(of, from, rec.Acknowledged.Content, seen[of.key]); ok {
			made[of.key] = m
		}
	}
	c.mu.Lock()
	edited := st.edited
	c.mu.Unlock()
	s := decide(facts{origin: from, live: l.live, made: made, seen: seen, acked: rec.Acknowledged.Content,
		edited: edited, startsFrom: c.startsFrom(st, l.objs, l.kv), lostRecord: from == firstSight && carried && oursValue(value, rec.Values) && !valueFits,
		quiet: clk.quiet(now), settle: c.opts.Settle, held: clk.held(now), maxWait: c.opts.MaxWait, paused: paused})
	log.Debug("decided", "revision", newest.Name, "origin", string(from), "made with", made, "step", s.verdict, "changed", s.changed)
	moving := c.hold(st, s.settling)

	if from != pending {
		c.forgetAppearance(newest.UID) // what it was made with is in the record now
	}
	switch from {
	case firstSight, madeSince:
		rec.Revisions[newest.UID] = unpinned(made, l.pinned)
	case older:
		if _, known := rec.Revisions[newest.UID]; !known {
			rec.Revisions[newest.UID] = unpinned(made, l.pinned)
		}
	}
	if s.verdict == start {
		if s.timedOut {
			c.neverSettled(w, moving, clk.held(now))
		}
		return c.start(ctx, l, from, s, made)
	}
	acknowledge(rec, from, newest, s.acked)
	switch s.verdict {
	case wait:
		return reconcile.Result{RequeueAfter: s.after}, nil
	case overruled:
		c.overruled(w, newest, s.differ)
	}
	return reconcile.Result{}, nil
}

// factsOf gathers what the decision knows of followed object o for the newest revision.
func (c *Controller) factsOf(o followed, l *look, snaps map[string]string, app appearance, noted bool) objectFacts {
	k, newest, rec := o.key(), l.revs[0], l.rec
	of := objectFacts{key: k, live: l.live[k], optional: o.optional, absent: o.absent, pinned: l.pinned[k],
		afterRevision: !o.absent && before(newest.ResourceVersion, o.meta.ResourceVersion)}
	of.recorded, of.hasRecorded = rec.Revisions[newest.UID][k]
	of.snapshot, of.hasSnapshot = snaps[k]
	a, ok := rec.Acknowledged.Content[k]
	of.acknowledged = ok
	of.unchanged = ok && (a == of.live || (rec.Versions[k] != "" && rec.Versions[k] == o.meta.ResourceVersion))
	if noted {
		rv, tracked := app.rvs[o.ref()]
		of.appearance = &appearanceFacts{followed: tracked, rv: rv, sameVersion: rv == o.meta.ResourceVersion,
			writtenBefore: before(o.meta.ResourceVersion, app.revision)}
		if tracked && rv != "" {
			of.appearance.earlier, of.appearance.earlierKnown = c.content.earlier(o, rv, l.kv)
		}
	}
	return of
}

// acknowledge records the newest revision, and the content it is compared with from now on. Our
// write's revision, made or pending, stays acknowledged as our write until the record is next
// written for a change (resolveWrote): a change costs one write of the record.
func acknowledge(rec *record, from origin, newest *caches.User, content map[string]string) {
	if from != pending && from != byUs {
		rec.Acknowledged.Revision, rec.Acknowledged.Wrote = newest.UID, nil
	}
	rec.Acknowledged.Content = content
}

// stateFor is the workload's state in this process.
func (c *Controller) stateFor(w *caches.User) *workloadState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateOf(w.Key(), w.UID)
}

// load returns the record to decide from: the one the API server holds when this process did not
// decide on that version (another replica wrote it, or it is the first look since the start), else
// the one this process kept (the same, or newer: written or not). A record of an earlier workload of
// the name, a foreign object at its name, or a record of a form this controller does not read
// (srv.unknown) is not read.
func (c *Controller) load(w *caches.User, st *workloadState) (*record, onServer, error) {
	srv, err := c.records.lookup(w)
	if err != nil {
		return nil, onServer{}, err
	}
	c.mu.Lock()
	k := st.kept
	c.mu.Unlock()
	if srv.exists && !srv.previous && srv.foreign == "" && (k == nil || k.rv != srv.rv) {
		rec, err := decode(srv.text)
		if err == nil {
			return rec, srv, nil
		}
		srv.unknown = fmt.Sprintf("ConfigMap %s/%s holds %v: left alone, never overwritten; decided from what the controller holds. "+
			"If no newer controller runs, delete the ConfigMap and the controller writes the record anew", w.Namespace, recordName(w), err)
	}
	if k != nil {
		return k.rec.clone(), srv, nil
	}
	return newRecord(), srv, nil
}

// keep notes the record as decided, its text, and the version of the record on the API server that
// holds what this process decided before ("" none).
func (c *Controller) keep(st *workloadState, rec *record, text, rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.kept = &kept{rec: rec.clone(), text: text, rv: rv}
}

// notKept tells that the record cannot be written, and counts it: the decisions go on from what this
// process holds, and a restart would lose that.
func (c *Controller) notKept(w *caches.User, why string) {
	c.tell(w, ReasonRecordNotKept, "the record of what each revision of %s was made with cannot be written: %s. "+
		"Config changes still start revisions, decided from what the controller holds in memory; a restart of the controller "+
		"before the record is written loses it. Fix the cause (e.g. room in a count/configmaps quota for ConfigMap %s)",
		describe(w), why, recordName(w))
	if c.metrics != nil {
		c.metrics.RecordNotKept(string(w.Kind()))
	}
}

// carryOver readies a record read from the API server for today's hashes: a record of before issue
// 37 (its values proven, its plain hashes of Secrets and of objects the environment alone reads made
// today's, or unknown), and a record made with another hash key (re-keyed from the content: rekey).
func (c *Controller) carryOver(ctx context.Context, w *caches.User, rec *record, revs []*caches.User, objs []followed, live map[string]string, kv keyVersion) error {
	isSecret := func(k string) bool { return strings.HasPrefix(k, string(refs.Secret)+"/") }
	if rec.legacy {
		rec.learnWritten(revs)
		then := map[string]string{}
		for _, o := range objs {
			if o.kind != refs.Secret && !o.dataOnly {
				then[o.key()] = live[o.key()]
				continue
			}
			h, err := c.content.legacy(ctx, o)
			if err != nil {
				return err
			}
			then[o.key()] = h
		}
		rec.migrate(live, then, isSecret)
	}
	if kv.key == nil || rec.Key == kv.id {
		return nil // no Secret followed, or no key to re-key to (the record's key space is kept)
	}
	if rec.Key == "" {
		rec.Key = kv.id
		return nil
	}
	pairs, err := c.rekeyPairs(ctx, objs, rec, live)
	if err != nil {
		return err
	}
	was := rec.Key
	lost := rec.rekey(kv.id, pairs, isSecret)
	c.keyChanged(w, was, kv.id, len(pairs), lost)
	return nil
}

// rekeyPairs are, per Secret the workload follows, what it holds now under the record's key and under
// the current one: by the record's key itself where this process held it (a key replaced or deleted
// while it ran), else by the version the record noted with the acknowledged content (after a restart:
// an object still at that version holds that content).
func (c *Controller) rekeyPairs(ctx context.Context, objs []followed, rec *record, live map[string]string) (map[string]rekeyed, error) {
	pairs := map[string]rekeyed{}
	old, held := c.key.held(rec.Key)
	for _, o := range objs {
		k := o.key()
		if o.kind != refs.Secret {
			continue
		}
		if held {
			h, err := c.content.hash(ctx, o, old)
			if err != nil {
				return nil, err
			}
			pairs[k] = rekeyed{old: h, new: live[k]}
			continue
		}
		if v := rec.Versions[k]; v != "" && v == o.meta.ResourceVersion {
			if a, ok := rec.Acknowledged.Content[k]; ok {
				pairs[k] = rekeyed{old: a, new: live[k]}
			}
		}
	}
	return pairs, nil
}

// tick is the workload's settle clock after a look that sees live (tickClock).
func (c *Controller) tick(st *workloadState, live map[string]string) clock {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.clock = tickClock(st.clock, live, st.changedAt, st.edited)
	return st.clock
}

// hold notes whether the settle window holds a change back (holdSince), and returns what moved
// meanwhile.
func (c *Controller) hold(st *workloadState, settling bool) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	moving := st.clock.moving
	st.clock = holdSince(st.clock, settling, c.now())
	return moving
}

// snapshotWaited is how long this process has waited for the newest revision's snapshots (0: not
// waiting).
func (c *Controller) snapshotWaited(st *workloadState, missing bool) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !missing:
		st.snapshotSince = time.Time{}
		return 0
	case st.snapshotSince.IsZero():
		st.snapshotSince = c.now()
	}
	return c.now().Sub(st.snapshotSince)
}

// waited is how long our last write on the workload has waited for its revision (0: not waiting).
func (c *Controller) waited(st *workloadState) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.pending.IsZero() {
		return 0
	}
	return c.now().Sub(st.pending)
}

// notePending notes whether our last write on the workload waits for its revision.
func (c *Controller) notePending(st *workloadState, waiting bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !waiting:
		st.pending = time.Time{}
	case st.pending.IsZero():
		st.pending = c.now()
	}
}

// before reports whether resourceVersion a was written before b. Kubernetes documents resourceVersions
// as comparable within a resource (resourceversion.CompareResourceVersion); a ConfigMap's and a
// ReplicaSet's are comparable where both are stored in one etcd, as they are unless
// --etcd-servers-overrides splits them. Unparsable: not known to be before.
func before(a, b string) bool {
	n, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && n < 0
}

// tellOptedOut tells the opt-in annotations that went with a change of the pod template, if any.
func (c *Controller) tellOptedOut(w *caches.User) {
	c.mu.Lock()
	s, ok := c.state[w.Key()]
	var went []string
	if ok {
		went, s.optedOut = s.optedOut, nil
	}
	c.mu.Unlock()
	if len(went) == 0 || c.events == nil {
		return
	}
	var fix []string
	for _, a := range went {
		fix = append(fix, a+"=true")
	}
	c.events.Eventf(involved(w), corev1.EventTypeWarning, ReasonOptedOut, "%s went with a change of the pod template of %s "+
		"(kubectl rollout undo to a revision made before the workload opted in copies that revision's annotations): config changes "+
		"no longer start revisions of it. To opt in again: kubectl annotate -n %s %s %s (the value it had, for a reload list)",
		strings.Join(went, ", "), describe(w), w.Namespace, describe(w), strings.Join(fix, " "))
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
		if pinned[o.key()] || !o.read || o.absent {
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

// followed lists the config objects the workload follows (follows), and tells about named ones that
// are missing.
func (c *Controller) followed(w *caches.User, sel Selection, reads []refs.Read) []followed {
	out, missing := c.follows(w, sel, reads)
	if len(missing) > 0 {
		c.tellAbout(w, ReasonInvalid, "missing", "the reload list names %s, which does not exist in namespace %s: its changes cannot start a revision "+
			"until it exists; create it or remove the name from the annotation", strings.Join(missing, ", "), w.Namespace)
	} else {
		c.untell(w, ReasonInvalid, "missing")
	}
	return out
}

// follows lists the config objects the workload follows, with what its template reads of them
// (optional objects the template reads that do not exist included, absent), and the names its
// reload lists give that do not exist. It reads the caches only.
func (c *Controller) follows(w *caches.User, sel Selection, reads []refs.Read) (out []followed, missing []string) {
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
			m, exists, _ := inf.Get(w.Namespace, r.Name)
			absent := !exists && r.Optional
			if absent {
				m = &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: r.Name}}
			}
			if (exists || absent) && sel.Follows(kind, m, true) {
				out = append(out, followed{kind: kind, meta: m, read: true, keys: r.Keys, dataOnly: r.DataOnly, optional: r.Optional, absent: absent})
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
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out, missing
}

// pinnedOf says which followed objects each revision's snapshots pin: labelled for pinning, in a
// namespace with pinning on, and read by the pod template.
func (c *Controller) pinnedOf(ns string, objs []followed) map[string]bool {
	out := map[string]bool{}
	if c.caches.Pinning == nil || !c.caches.Pinning.Enabled(ns) {
		return out
	}
	for _, o := range objs {
		out[o.key()] = o.read && !o.absent && api.Pinned(o.meta.Labels)
	}
	return out
}

// revisionContent is what a revision's pods read, per followed object: its snapshot's content for a
// pinned object; for the others the record's, else the snapshot's the revision owns from when the
// object was pinned; objects it does not know are absent. (Going back to a revision is about what its
// pods would read; madeWith, about what the newest was made with.)
func (c *Controller) revisionContent(ctx context.Context, r *caches.User, objs []followed, pinned map[string]bool, rec *record, kv keyVersion) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		k := o.key()
		if !pinned[k] {
			if h, ok := rec.Revisions[r.UID][k]; ok {
				out[k] = h
				continue
			}
		}
		if h, ok := c.snapshotContent(ctx, r, o, kv); ok {
			out[k] = h
		}
	}
	return out
}

// snapshotContent is the content hash of what the workload reads of the snapshot of o that revision r
// owns (its pin), if any: whether the object is pinned now or not, the snapshot holds what r was
// pinned with.
func (c *Controller) snapshotContent(ctx context.Context, r *caches.User, o followed, kv keyVersion) (string, bool) {
	if c.caches.Pinning == nil || o.absent {
		return "", false
	}
	snap, ok := c.caches.Pinning.Snapshot(r.Namespace, string(r.UID), refs.Ref{Kind: o.kind, Name: o.meta.Name})
	if !ok {
		return "", false
	}
	h, err := c.content.snapshot(ctx, o, r.Namespace, snap, kv)
	if err != nil {
		logging.FromContext(ctx).Debug("reading a snapshot", "snapshot", snap, "err", err)
		return "", false
	}
	return h, true
}
