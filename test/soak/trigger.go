package main

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Config-triggered revisions in the soak (docs/config-starts.md): the workloads trig-* carry Reloader's
// annotations and read pinned objects (<name>-pin, and by the seed <name>-pin-secret) that are edited
// in place with nothing else changed: no checksum on the template. The controller then writes its
// config-hash annotation on the pod template after the settle window, and the workload's controller
// makes the revision. Every edit step is one change, run to its end and judged with the soak's own
// reading (revisions.go), before the next step:
//
//   before: the workload is settled: its controller runs its template (current revision), that
//           revision is pinned (it owns a snapshot of each pinned object) and recorded, the revision
//           watch has seen it, and the config trigger has taken its first look (its record exists);
//   then:   the edits (one, a burst, a revert, ...) and whatever the step does in between;
//   expect: from the revisions that existed before the edits and the content C after them:
//           "same" when the current revision was created with C (no net change): no revision made,
//             the current one stays;
//           "back" when another revision not being deleted was created with C and its template is
//             the workload's but for our annotation (base): no revision made, it becomes current;
//           "new" otherwise: exactly one revision made, and it becomes current; also when another
//             field manager owns the config-hash annotation on the template with a value we wrote
//             (an undo copied an older revision's value there): the controller takes it back
//             (docs/config-starts.md, Never a fight);
//   wait:   for that outcome (up to the settle window and 90 s), then until one more settle window
//           has passed since the last edit and 2 s since the outcome, for a second write;
//   judge:  the revisions the watch saw created for the workload since, and the current revision.
//
// The pinning invariants (unpinned, wrong: pods read the content their revision was created with)
// hold for these workloads as for pin-canary and pin-web; the summary adds revisions=K/N: of N judged
// changes, K made exactly the revisions expected.

// configSettle is the controllers' -config-settle (the default): edits within it are one change.
const configSettle = trigger.DefaultSettle

// How a config-triggered workload opts in (its Reloader annotation).
const (
	reloadAuto  = "auto"  // reloader.stakater.com/auto: "true"
	reloadList  = "list"  // configmap.reloader.stakater.com/reload and secret.reloader.stakater.com/reload naming its objects
	reloadKinds = "kinds" // configmap.reloader.stakater.com/auto and secret.reloader.stakater.com/auto
)

func (w *app) reloaderAnnotations() map[string]string {
	switch w.reload {
	case reloadList:
		out := map[string]string{api.ReloaderConfigMapReload: w.pinName(false)}
		if w.pinSecret {
			out[api.ReloaderSecretReload] = w.pinName(true)
		}
		return out
	case reloadKinds:
		return map[string]string{api.ReloaderConfigMapAuto: "true", api.ReloaderSecretAuto: "true"}
	case reloadAuto:
		return map[string]string{api.ReloaderAuto: "true"}
	}
	return nil
}

// apiKind is the kind of the object whose revisions the workload has (a workloadRef Rollout's are
// the Rollout's).
func (k kind) apiKind() string {
	switch k {
	case canary, workloadRef:
		return "Rollout"
	}
	return string(k)
}

// Config-triggered actions.
const (
	actTrigEdit    action = "trig-edit"    // one pinned object edited in place, nothing else
	actTrigRevert  action = "trig-revert"  // every pinned object back to content the workload held before
	actTrigBurst   action = "trig-burst"   // 2–4 edits within the settle window, sometimes back to the start
	actTrigPaused  action = "trig-paused"  // an edit while the Rollout's canary is paused (one is started first if none)
	actTrigRestart action = "trig-restart" // an edit, then the controller killed before it settles, back 0–8 s later
)

var triggerActions = []action{actTrigEdit, actTrigRevert, actTrigBurst, actTrigPaused, actTrigRestart}

// trigPlan are a config-triggered step's parameters, drawn before the cluster is touched.
type trigPlan struct {
	objects    []uint64      // which pinned object each edit changes
	back       uint64        // trig-revert: which earlier content
	netZero    bool          // trig-burst: the last edits bring every object back to where the burst began
	toStable   bool          // trig-paused: the edit goes back to the stable revision's content
	leaderOnly bool          // trig-restart: only the Lease holder is killed (the standby takes over)
	down       time.Duration // trig-restart: how long the killed replicas stay down
}

func (s *soak) drawTrigger(p *plan) {
	switch p.a {
	case actTrigEdit:
		p.trig.objects = []uint64{s.rnd.r.Uint64()}
	case actTrigBurst:
		n := 2 + s.rnd.intn(3)
		for range n {
			p.trig.objects = append(p.trig.objects, s.rnd.r.Uint64())
		}
		p.trig.netZero = s.rnd.chance(0.25)
	case actTrigRevert:
		p.trig.back = s.rnd.r.Uint64()
	case actTrigPaused:
		p.trig.objects = []uint64{s.rnd.r.Uint64()}
		p.trig.toStable = s.rnd.chance(0.35)
	case actTrigRestart:
		p.trig.objects = []uint64{s.rnd.r.Uint64()}
		p.trig.leaderOnly = s.rnd.chance(0.4)
		p.trig.down = time.Duration(s.rnd.intn(9)) * time.Second
	}
}

// contentState is what a workload's pinned objects hold: pin key -> content.
type contentState map[string]map[string]string

func sameState(a, b contentState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !maps.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func (s *soak) stateOf(w *app) contentState {
	out := contentState{}
	for _, key := range w.pinKeys() {
		out[key] = s.pin.objects[key]
	}
	return out
}

// noteState appends what a config-triggered workload's objects hold now to its states.
func (s *soak) noteState(w *app) {
	if w.trigger {
		w.states = append(w.states, s.stateOf(w))
	}
}

// triggerState are the figures of the config-triggered changes.
type triggerState struct {
	watch        *revisionWatch
	judged       int            // changes judged
	right        int            // judged changes that made exactly the revisions expected
	made         int            // revisions made by judged changes
	expected     int            // revisions expected of them
	outcomes     map[string]int // judged changes by expectation: new, back, same
	skipped      map[string]int // changes not judged, by reason
	pinningOff   int            // judged changes made while their namespace had pinning off
	afterRollout int            // judged edits right after a promote, abort or undo
	notSettled   int            // changes not made: the workload did not settle
	restartDowns []time.Duration
	events       map[string]int32 // the trigger's Events by reason, read at the end (before the cluster goes)
}

func newTriggerState() *triggerState {
	return &triggerState{outcomes: map[string]int{}, skipped: map[string]int{}}
}

// change is one config change of a triggered workload, from its first edit to its judgement.
type change struct {
	w           *app
	what        string
	revs        *workloadRevisions // before the edits
	before      map[types.UID]string
	first, last time.Time // the first and last write of the change
	deploy      bool      // config and template together (pin-config): the deploy's one revision
	content     contentState
	expect      string // new, back, same
	targets     []*revInfo
	skip        string // why it is not judged
	pinningOff  bool
}

// write records a write of the change at now.
func (ch *change) write() {
	now := time.Now()
	if ch.first.IsZero() {
		ch.first = now
	}
	ch.last = now
}

// trigStep runs a config-triggered step.
func (s *soak) trigStep(ctx context.Context, p plan) (string, error) {
	w := p.w
	keys := w.pinKeys()
	switch p.a {
	case actTrigEdit:
		return s.change(ctx, w, "edit", func(ctx context.Context, ch *change) error {
			return s.edit(ctx, ch, keys[index(p.trig.objects[0], len(keys))], 0)
		})
	case actTrigBurst:
		return s.change(ctx, w, "burst", func(ctx context.Context, ch *change) error {
			start := s.stateOf(w)
			for i, v := range p.trig.objects {
				if err := s.edit(ctx, ch, keys[index(v, len(keys))], i+1); err != nil {
					return err
				}
			}
			if p.trig.netZero {
				return s.setState(ctx, ch, start)
			}
			return nil
		})
	case actTrigRevert:
		var earlier []contentState
		now := s.stateOf(w)
		for _, st := range w.states {
			if !sameState(st, now) {
				earlier = append(earlier, st)
			}
		}
		if len(earlier) == 0 {
			return "every earlier content is the current one: nothing to revert to", nil
		}
		to := earlier[index(p.trig.back, len(earlier))]
		return s.change(ctx, w, "revert", func(ctx context.Context, ch *change) error { return s.setState(ctx, ch, to) })
	case actTrigRestart:
		return s.change(ctx, w, "restart", func(ctx context.Context, ch *change) error {
			if err := s.edit(ctx, ch, keys[index(p.trig.objects[0], len(keys))], 0); err != nil {
				return err
			}
			return s.restartBeforeSettled(ctx, p.trig.leaderOnly, p.trig.down)
		})
	case actTrigPaused:
		return s.trigPaused(ctx, w, p)
	}
	return "", fmt.Errorf("unknown action %q", p.a)
}

// edit gives one pinned object new content and writes it.
func (s *soak) edit(ctx context.Context, ch *change, key string, n int) error {
	s.pin.objects[key] = s.pinContent(key, n)
	ch.write()
	return s.putPin(ctx, ch.w, key)
}

// setState writes every pinned object whose content differs from to.
func (s *soak) setState(ctx context.Context, ch *change, to contentState) error {
	for _, key := range ch.w.pinKeys() {
		if maps.Equal(s.pin.objects[key], to[key]) {
			continue
		}
		s.pin.objects[key] = to[key]
		ch.write()
		if err := s.putPin(ctx, ch.w, key); err != nil {
			return err
		}
	}
	return nil
}

// restartBeforeSettled kills the controller right after an edit, before its settle window ends: the
// Lease holder alone (the standby takes over after the lease duration) or both replicas, each started
// again after down.
func (s *soak) restartBeforeSettled(ctx context.Context, leaderOnly bool, down time.Duration) error {
	s.pin.disrupted.open(time.Now())
	var killed []*replica
	if l := s.ctl.leader(ctx); leaderOnly && l != nil {
		killed = []*replica{l}
	} else {
		killed = s.ctl.replicas[:]
	}
	for _, r := range killed {
		if r.running() {
			r.killed = true
			r.p.Kill()
		}
	}
	s.trig.restartDowns = append(s.trig.restartDowns, down)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	for _, r := range killed {
		if err := s.ctl.start(ctx, r); err != nil {
			return err
		}
	}
	return s.ctl.waitReady(ctx, 2*time.Minute)
}

// trigPaused edits a triggered Rollout's config while its canary is paused at its pause step, starting
// one first (a change of its own) when none is: new content (a new canary replaces the paused one), or
// by the seed the stable revision's content (back to stable).
func (s *soak) trigPaused(ctx context.Context, w *app, p plan) (string, error) {
	keys := w.pinKeys()
	var out []string
	paused, stable, err := s.canaryPaused(ctx, w)
	if err != nil {
		return "", err
	}
	if !paused {
		first, err := s.change(ctx, w, "edit starting a canary", func(ctx context.Context, ch *change) error {
			return s.edit(ctx, ch, keys[index(p.trig.objects[0], len(keys))], 1)
		})
		if err != nil {
			return "", err
		}
		out = append(out, first)
		if err := framework.Eventually(ctx, time.Minute, "the canary paused", func(ctx context.Context) (bool, string, error) {
			paused, stable, err = s.canaryPaused(ctx, w)
			return paused, "not paused", err
		}); err != nil {
			return strings.Join(append(out, "no paused canary: "+err.Error()), "; "), nil
		}
	}
	rec := s.pin.revisions[stable]
	second, err := s.change(ctx, w, "edit during the paused canary", func(ctx context.Context, ch *change) error {
		if p.trig.toStable && rec != nil && !rec.bestEffort {
			ch.what = "back to the stable revision's content during the paused canary"
			return s.setState(ctx, ch, contentState(rec.content))
		}
		return s.edit(ctx, ch, keys[index(p.trig.objects[0], len(keys))], 2)
	})
	if err != nil {
		return strings.Join(out, "; "), err
	}
	return strings.Join(append(out, second), "; "), nil
}

// canaryPaused reports whether the Rollout's canary is paused at a pause step (not aborted), and the
// uid of its stable ReplicaSet.
func (s *soak) canaryPaused(ctx context.Context, w *app) (bool, types.UID, error) {
	u, err := s.c.Dynamic.Resource(workload.RolloutGVR).Namespace(w.ns).Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	res, err := s.resolve(ctx, w)
	if err != nil {
		return false, "", err
	}
	st := res.Rollout.Status
	var stable types.UID
	if rs := res.ByHash(st.StableRS); rs != nil {
		stable = rs.UID
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "pauseConditions")
	return st.StableRS != "" && st.CurrentPodHash != st.StableRS && !st.Abort && len(conds) > 0, stable, nil
}

// change runs one config change of a triggered workload: waits until it is settled, makes the edits
// (and whatever edits does in between), and waits for the outcome and judges it. It returns what
// happened; an error means the change was not made or not completely.
func (s *soak) change(ctx context.Context, w *app, what string, edits func(context.Context, *change) error) (string, error) {
	ch, err := s.beginChange(ctx, w, what)
	if err != nil {
		s.trig.notSettled++
		return "", fmt.Errorf("%s not made: %w", what, err)
	}
	if err := edits(ctx, ch); err != nil {
		s.noteState(w)
		return "", err
	}
	s.noteState(w)
	s.expect(ch)
	return s.finishChange(ctx, ch), nil
}

// beginChange waits until the workload is settled (see the top of this file) and captures its
// revisions.
func (s *soak) beginChange(ctx context.Context, w *app, what string) (*change, error) {
	wr, err := s.waitPinned(ctx, w, time.Minute)
	if err != nil {
		return nil, err
	}
	record := trigger.RecordName(w.kind.apiKind(), w.name)
	err = framework.Eventually(ctx, time.Minute, "the controller's first look at "+w.String(), func(ctx context.Context) (bool, string, error) {
		if !s.trig.watch.seen(wr.owner, wr.current.uid) {
			return false, "the revision watch has not seen " + wr.current.name, nil
		}
		cm, err := s.c.Kube.CoreV1().ConfigMaps(w.ns).Get(ctx, record, metav1.GetOptions{})
		if err != nil {
			return false, "record " + record + ": " + err.Error(), nil
		}
		for _, o := range cm.OwnerReferences {
			if o.UID == wr.owner && cm.Labels[api.RecordLabel] == api.RecordValue {
				return true, "", nil
			}
		}
		return false, "record " + record + " is not the current workload's", nil
	})
	if err != nil {
		return nil, err
	}
	ch := &change{w: w, what: what, revs: wr, before: s.trig.watch.of(wr.owner), pinningOff: !s.pin.on[w.ns]}
	for _, r := range wr.all {
		ch.before[r.uid] = r.name
	}
	return ch, nil
}

// expect decides what the change should make, from the revisions before it and its content now.
func (s *soak) expect(ch *change) {
	ch.content = s.stateOf(ch.w)
	if ch.first.IsZero() {
		ch.skip = "no write"
		return
	}
	if ch.last.Sub(ch.first) >= configSettle-time.Second {
		ch.skip = "writes not within the settle window"
		return
	}
	if ch.deploy {
		ch.expect = "new"
		return
	}
	if cur := s.pin.revisions[ch.revs.current.uid]; cur != nil && sameState(contentState(cur.content), ch.content) {
		ch.expect = "same"
		if cur.bestEffort {
			ch.skip = "the current revision was pinned best effort"
		}
		return
	}
	ch.expect = "new"
	want := base(ch.revs.template)
	for _, r := range ch.revs.all {
		rec := s.pin.revisions[r.uid]
		if r.uid == ch.revs.current.uid || r.deleting || rec == nil || !sameState(contentState(rec.content), ch.content) || base(r.tmpl) != want {
			continue
		}
		if rec.bestEffort {
			ch.skip = "a revision with this content was pinned best effort"
		}
		ch.expect = "back"
		ch.targets = append(ch.targets, r)
	}
}

// finishChange waits for the change's outcome, then judges the revisions made and the one running.
func (s *soak) finishChange(ctx context.Context, ch *change) string {
	var wr *workloadRevisions
	reached := false
	var at time.Time
	deadline := ch.last.Add(configSettle + 90*time.Second)
	for !reached && time.Now().Before(deadline) && ctx.Err() == nil {
		got, err := s.revisionsOf(ctx, ch.w)
		if err == nil && got.owner == ch.revs.owner && got.current != nil {
			wr = got
			cur := wr.current
			_, existed := ch.before[cur.uid]
			switch {
			case !existed: // a new revision runs: what "new" waits for, and wrong for the others
				reached = true
			case ch.expect == "back":
				reached = containsRev(ch.targets, cur.uid)
			case ch.expect == "same" || ch.skip != "":
				reached = time.Since(ch.last) > configSettle+3*time.Second
			}
		}
		if reached {
			at = time.Now()
			break
		}
		sleep(ctx, 500*time.Millisecond)
	}
	// A second write would come within a settle window of the last edit, or right after the first.
	quiet := ch.last.Add(configSettle + 3*time.Second)
	if !at.IsZero() && at.Add(2*time.Second).After(quiet) {
		quiet = at.Add(2 * time.Second)
	}
	sleep(ctx, time.Until(quiet))
	if got, err := s.revisionsOf(ctx, ch.w); err == nil && got.owner == ch.revs.owner {
		wr = got
	}
	var made []string
	for uid, name := range s.trig.watch.of(ch.revs.owner) {
		if _, ok := ch.before[uid]; !ok {
			made = append(made, name)
		}
	}
	sort.Strings(made)
	var cur *revInfo
	if wr != nil {
		cur = wr.current
		if cur != nil {
			s.recordRevision(cur.uid, cur.name, cur.created, ch.w)
		}
	}
	outcome := fmt.Sprintf("%s: %d made (%s), runs %s", ch.what, len(made), strings.Join(made, ", "), cur)
	if ctx.Err() != nil {
		ch.skip = "the soak was stopped before its outcome" // its waits were cut short: nothing to judge
	}
	if ch.skip != "" {
		s.trig.skipped[ch.skip]++
		return outcome + "; not judged: " + ch.skip
	}
	expect := ch.expect
	if expect == "back" && wr != nil && !targetLives(wr, ch.targets) {
		expect = "new" // pruned meanwhile: a revert to a revision that no longer exists makes a new one
	}
	ok := false
	switch expect {
	case "new":
		ok = len(made) == 1 && cur != nil && cur.name == made[0] && !existedBefore(ch, cur)
	case "back":
		ok = len(made) == 0 && cur != nil && containsRev(ch.targets, cur.uid)
	case "same":
		ok = len(made) == 0 && cur != nil && cur.uid == ch.revs.current.uid
	}
	s.trig.judged++
	s.trig.outcomes[expect]++
	s.trig.made += len(made)
	if expect == "new" {
		s.trig.expected++
	}
	if ch.pinningOff || !s.pin.on[ch.w.ns] {
		s.trig.pinningOff++
	}
	want := map[string]string{"new": "one new revision", "same": "no revision, " + ch.revs.current.name + " still running",
		"back": "no revision, back to " + revNames(ch.targets)}[expect]
	if ok {
		s.trig.right++
		return outcome + "; expected " + want
	}
	s.report([]violation{{kind: "revisions", key: ch.w.kind.apiKind() + "/" + ch.w.String(), id: fmt.Sprintf("%d/%s", s.step, ch.what),
		detail: fmt.Sprintf("%s: expected %s; %d made (%s), runs %s (writes %s–%s)", ch.what, want, len(made), strings.Join(made, ", "), cur,
			ch.first.Format("15:04:05.000"), ch.last.Format("15:04:05.000"))}})
	return outcome + "; EXPECTED " + want
}

func existedBefore(ch *change, r *revInfo) bool {
	_, ok := ch.before[r.uid]
	return ok
}

func containsRev(rs []*revInfo, uid types.UID) bool {
	for _, r := range rs {
		if r.uid == uid {
			return true
		}
	}
	return false
}

func revNames(rs []*revInfo) string {
	var names []string
	for _, r := range rs {
		names = append(names, r.name)
	}
	return strings.Join(names, " or ")
}

// targetLives reports whether one of the revisions a revert should go back to still exists.
func targetLives(wr *workloadRevisions, targets []*revInfo) bool {
	for _, t := range targets {
		if r := wr.byUID(t.uid); r != nil && !r.deleting {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// pinConfigTriggered is pin-config on a config-triggered workload: the config changed in place and the
// checksum deployed with it, as Helm does: exactly one revision, the deploy's; the trigger adds none.
func (s *soak) pinConfigTriggered(ctx context.Context, w *app) (string, error) {
	return s.change(ctx, w, "config and checksum together", func(ctx context.Context, ch *change) error {
		ch.deploy = true
		for _, key := range w.pinKeys() {
			s.pin.objects[key] = s.pinContent(key, 0)
			ch.write()
			if err := s.putPin(ctx, w, key); err != nil {
				return err
			}
		}
		s.pin.changes++
		w.checksum = s.pinChecksum(w)
		ch.write()
		return s.setTemplate(ctx, w, w.template())
	})
}

// trigEvents counts the Events the config trigger recorded on the soak's workloads, by reason.
func (s *soak) trigEvents(ctx context.Context) map[string]int32 {
	out := map[string]int32{}
	reasons := []string{trigger.ReasonStarted, trigger.ReasonBack, trigger.ReasonTakenBack, trigger.ReasonOverruled, trigger.ReasonInvalid, trigger.ReasonUnpinned, trigger.ReasonNotHonoured}
	for _, ns := range namespaces {
		list, err := s.c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, e := range list.Items {
			for _, r := range reasons {
				if e.Reason == r {
					out[r] += max(e.Count, 1)
				}
			}
		}
	}
	return out
}

// trigSummary is the config-triggered line of the summary.
func (s *soak) trigSummary() string {
	t := s.trig
	var drawn []string
	for _, a := range triggerActions {
		drawn = append(drawn, fmt.Sprintf("%s=%d", a, s.drawn[a]))
	}
	var skipped []string
	for _, k := range sortedKeys(t.skipped) {
		skipped = append(skipped, fmt.Sprintf("%s: %d", k, t.skipped[k]))
	}
	if len(skipped) == 0 {
		skipped = []string{"none"}
	}
	ev := t.events
	var events []string
	for _, k := range sortedKeys(ev) {
		events = append(events, fmt.Sprintf("%s=%d", k, ev[k]))
	}
	return fmt.Sprintf("config-triggered: steps drawn %s; changes judged %d (new %d, back %d, same %d; %d after a promote, abort or undo; %d with pinning off in their namespace), right %d; revisions made %d, expected %d; not judged: %s; not made (the workload did not settle): %d; trigger events %s",
		strings.Join(drawn, " "), t.judged, t.outcomes["new"], t.outcomes["back"], t.outcomes["same"], t.afterRollout, t.pinningOff, t.right, t.made, t.expected,
		strings.Join(skipped, ", "), t.notSettled, strings.Join(events, " "))
}

// editAfter follows a promote, abort or undo of a config-triggered workload with an edit of one of
// its objects, judged like any change: after a rollback above all, the fix-forward edit must start
// its revision (the controller takes back config-hash when the undo copied a value of ours).
func (s *soak) editAfter(ctx context.Context, w *app, did string) (string, error) {
	if !w.trigger || s.ctl.down {
		return did, nil
	}
	keys := w.pinKeys()
	judged := s.trig.judged
	out, err := s.change(ctx, w, "edit after "+did, func(ctx context.Context, ch *change) error {
		return s.edit(ctx, ch, keys[s.step%len(keys)], 0)
	})
	if s.trig.judged > judged {
		s.trig.afterRollout++
	}
	return did + "; " + out, err
}

// annotateTriggered opts a created workload in with its Reloader annotation (as `kubectl annotate`).
func (s *soak) annotateTriggered(ctx context.Context, w *app) error {
	if !w.trigger {
		return nil
	}
	switch w.kind {
	case deployment:
		return s.c.Annotate(ctx, framework.DeploymentGVR, w.ns, w.name, w.reloaderAnnotations())
	case statefulSet:
		return s.c.Annotate(ctx, framework.StatefulSetGVR, w.ns, w.name, w.reloaderAnnotations())
	case daemonSet:
		return s.c.Annotate(ctx, framework.DaemonSetGVR, w.ns, w.name, w.reloaderAnnotations())
	}
	return nil // Rollouts carry it from their creation
}
