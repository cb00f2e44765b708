package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// The steps: a weighted random choice among the actions possible in the model's current state,
// with every parameter drawn before the cluster is touched.

type action string

const (
	actConfig     action = "config"        // a new config revision, deployed to the workloads using it
	actImage      action = "image"         // an image-only deploy
	actPromote    action = "promote"       // kubectl argo rollouts promote
	actAbort      action = "abort"         // kubectl argo rollouts abort
	actUndo       action = "undo"          // back to the previous revision's template
	actHistory    action = "history"       // a low revisionHistoryLimit, then a deploy (CronJob: Jobs pruned)
	actCronRun    action = "cron-run"      // kubectl create job --from=cronjob/...
	actSpotKill   action = "spot-kill"     // pods deleted at once, as when spot nodes go
	actDelete     action = "delete"        // kubectl delete of a workload
	actRecreate   action = "recreate"      // a deleted workload comes back
	actCfgDelete  action = "config-delete" // kubectl delete of config in use (helm upgrade without keep)
	actCtlKill    action = "ctl-kill"      // kill -9 of every controller replica; back some steps later
	actLeaderKill action = "leader-kill"   // kill -9 of the Lease holder; the standby takes over
	actAPIServer  action = "apiserver-restart"
	// Zero-touch pinning (pinning.go).
	actPinConfig     action = "pin-config"     // a pinned object changed in place, its checksum deployed
	actCanaryKill    action = "canary-kill"    // a pod of the pinned Rollout deleted at once, a stable one mid-canary
	actWebhookKill   action = "webhook-kill"   // kill -9 of a replica serving the webhook (the standby, if one runs)
	actCertRotate    action = "cert-rotate"    // the certificate Secret deleted: a new CA and serving certificates, both replicas serving
	actBundleWipe    action = "bundle-wipe"    // the webhook configuration's caBundle emptied, as a replace by another tool does
	actWebhookPolicy action = "webhook-policy" // failurePolicy Fail <-> Ignore, by a rolling restart
	actPinToggle     action = "pin-toggle"     // a namespace's pinning label removed for 1–4 steps
	// Policy mode only (policy.go): a part of ours missing.
	actCRDDelete    action = "crd-delete"    // the PinTable CRD deleted (every table with it) and applied again
	actTableDelete  action = "table-delete"  // kubectl delete of a namespace's PinTable or of a shard
	actOutageDeploy action = "outage-deploy" // every replica killed, then a pinned deploy; back 1–3 steps later
)

// faultActions are counted as faults.
var faultActions = []action{actCtlKill, actLeaderKill, actAPIServer, actSpotKill, actCanaryKill, actWebhookKill, actTrigRestart, actCertRotate, actBundleWipe,
	actCRDDelete, actTableDelete, actOutageDeploy}

// pinningActions are the pinning steps (the summary counts them).
var pinningActions = []action{actPinConfig, actCanaryKill, actWebhookKill, actWebhookPolicy, actPinToggle, actCertRotate, actBundleWipe,
	actCRDDelete, actTableDelete, actOutageDeploy}

func isFault(a action) bool {
	for _, f := range faultActions {
		if f == a {
			return true
		}
	}
	return false
}

var weights = []struct {
	a action
	w int
}{
	{actConfig, 24}, {actImage, 14}, {actPromote, 10}, {actAbort, 5}, {actUndo, 5}, {actHistory, 6},
	{actCronRun, 4}, {actSpotKill, 8}, {actDelete, 4}, {actRecreate, 6}, {actCfgDelete, 3},
	{actCtlKill, 4}, {actLeaderKill, 4}, {actAPIServer, 2},
	{actPinConfig, 10}, {actCanaryKill, 4}, {actWebhookKill, 3}, {actWebhookPolicy, 3}, {actPinToggle, 3},
	{actCertRotate, 3}, {actBundleWipe, 3},
	{actTrigEdit, 8}, {actTrigRevert, 5}, {actTrigBurst, 4}, {actTrigPaused, 3}, {actTrigRestart, 3},
	// Never possible in webhook mode: its draws stay those of the seeds chosen for it.
	{actCRDDelete, 2}, {actTableDelete, 3}, {actOutageDeploy, 3},
}

// plan is one step, decided.
type plan struct {
	a       action
	w       *app
	which   string   // config: own, shared or secret
	limit   int32    // history
	reuse   bool     // recreate: with the config it had
	picks   []uint64 // spot-kill, canary-kill: which pods; config-delete: which object
	downFor int      // ctl-kill, pin-toggle: steps until it comes back
	ns      string   // pin-toggle
	trig    trigPlan // config-triggered steps (trigger.go)
}

func (s *soak) eligible(a action) []*app {
	exists := func(ok func(*app) bool) []*app {
		return s.targets(func(w *app) bool { return w.exists && ok(w) })
	}
	every := func(*app) bool { return true }
	notPinned := func(w *app) bool { return !w.pinned }
	switch a {
	case actImage, actDelete:
		return exists(every)
	case actConfig:
		return exists(notPinned) // a pinned object is changed in place: pin-config
	case actCfgDelete:
		if s.ctl.down {
			return nil // an object the controller has not seen yet has no finalizer: documented exposure
		}
		return exists(notPinned) // a pinned object is not opted in: nothing protects it, by design
	case actPinConfig:
		if s.ctl.down {
			return nil // its previous revision must be pinned first
		}
		return exists(func(w *app) bool { return w.pinned })
	case actCanaryKill:
		return exists(func(w *app) bool { return w.pinned && w.kind == canary })
	case actOutageDeploy:
		if s.ctl.down || !s.admissionPolicy() {
			return nil
		}
		return exists(func(w *app) bool { return w.pinned && !w.trigger })
	case actTrigEdit, actTrigBurst, actTrigRestart, actTrigRevert, actTrigPaused:
		if s.ctl.down {
			return nil // a change is judged against a running controller (trig-restart stops it itself)
		}
		return exists(func(w *app) bool {
			switch a {
			case actTrigRevert:
				return w.trigger && w.changesDrawn > 0
			case actTrigPaused:
				return w.trigger && w.kind.isRollout()
			}
			return w.trigger
		})
	case actPromote, actAbort:
		return exists(func(w *app) bool { return w.kind.isRollout() })
	case actUndo:
		return exists(func(w *app) bool { return w.kind.hasReplicaSets() })
	case actHistory:
		return exists(every)
	case actCronRun:
		return exists(func(w *app) bool { return w.kind == cronJob })
	case actRecreate:
		return s.targets(func(w *app) bool { return !w.exists })
	}
	return nil
}

// possible reports whether an action without a target can run now.
func (s *soak) possible(a action) bool {
	switch a {
	case actSpotKill:
		return true
	case actWebhookKill, actWebhookPolicy, actCertRotate, actBundleWipe:
		return !s.ctl.down && !s.admissionPolicy() // policy mode: no webhook
	case actCtlKill, actLeaderKill:
		return !s.ctl.down
	case actCRDDelete, actTableDelete:
		return !s.ctl.down && s.admissionPolicy() // the controller puts the tables back
	case actPinToggle:
		return s.pin.offNS == "" // one namespace at a time
	case actAPIServer:
		return s.localCluster
	}
	return len(s.eligible(a)) > 0
}

func (s *soak) choose() plan {
	total := 0
	for _, x := range weights {
		if s.possible(x.a) {
			total += x.w
		}
	}
	n := s.rnd.intn(total)
	var p plan
	for _, x := range weights {
		if !s.possible(x.a) {
			continue
		}
		if n < x.w {
			p.a = x.a
			break
		}
		n -= x.w
	}
	if ts := s.eligible(p.a); len(ts) > 0 {
		p.w = ts[s.rnd.intn(len(ts))]
	}
	switch p.a {
	case actConfig:
		u := s.rnd.r.Float64()
		switch {
		case p.w.shared != "" && u < 0.25:
			p.which = "shared"
		case p.w.secret != "" && u < 0.40:
			p.which = "secret"
		default:
			p.which = "own"
		}
	case actHistory:
		p.limit = int32(s.rnd.intn(2))
	case actCfgDelete:
		p.picks = []uint64{s.rnd.r.Uint64()}
	case actRecreate:
		p.reuse = s.rnd.chance(0.5)
	case actSpotKill:
		k := 1 + s.rnd.intn(3)
		for range k {
			p.picks = append(p.picks, s.rnd.r.Uint64())
		}
	case actCanaryKill:
		p.picks = []uint64{s.rnd.r.Uint64()}
	case actCtlKill, actOutageDeploy:
		p.downFor = 1 + s.rnd.intn(3)
	case actTableDelete:
		p.ns = namespaces[s.rnd.intn(len(namespaces))]
		p.picks = []uint64{s.rnd.r.Uint64()}
	case actPinToggle:
		p.ns = namespaces[s.rnd.intn(len(namespaces))]
		p.downFor = 1 + s.rnd.intn(4)
	default:
		s.drawTrigger(&p)
	}
	return p
}

// countDrawn counts a drawn step, and on a config-triggered workload a step that changes its content
// (trig-revert needs one before it): from the draw, not from whether it succeeded, so that what can be
// drawn next depends on the seed alone, as in plan.
func (s *soak) countDrawn(p plan) {
	s.drawn[p.a]++
	if p.w == nil || !p.w.trigger {
		return
	}
	switch p.a {
	case actTrigEdit, actTrigBurst, actTrigRestart, actTrigPaused, actTrigRevert, actPinConfig:
		p.w.changesDrawn++
	case actRecreate:
		if !p.reuse {
			p.w.changesDrawn++
		}
	}
}

// plan prints what the seed draws, step by step, as loop would if every step succeeded: the model
// changes that decide what can be drawn next (a workload deleted or recreated, the controller down
// and back) are made, nothing else. Then the count of each action drawn.
func (s *soak) plan(out io.Writer) {
	s.placeFleet()
	for _, w := range s.fleet {
		w.exists = true
	}
	for s.step = 1; s.step <= s.o.steps; s.step++ {
		if s.ctl.down && s.step >= s.ctl.upAt {
			s.ctl.down = false
		}
		if s.pin.offNS != "" && s.step >= s.pin.onAt {
			s.pin.offNS = ""
		}
		p := s.choose()
		s.countDrawn(p)
		target := "-"
		if p.w != nil {
			target = p.w.describe()
		}
		switch p.a {
		case actDelete:
			p.w.exists = false
		case actRecreate:
			p.w.exists = true
		case actCtlKill, actOutageDeploy:
			s.ctl.down, s.ctl.upAt = true, s.step+p.downFor
		case actPinToggle:
			s.pin.offNS, s.pin.onAt = p.ns, s.step+p.downFor
			target = fmt.Sprintf("%s, back at step %d", p.ns, s.pin.onAt)
		}
		fmt.Fprintf(out, "step %3d  %-17s %s\n", s.step, p.a, target)
		if s.step%s.o.settleEvery == 0 {
			s.ctl.down = false
		}
	}
	var drawn []string
	for _, x := range weights {
		drawn = append(drawn, fmt.Sprintf("%s=%d", x.a, s.drawn[x.a]))
	}
	fmt.Fprintf(out, "drawn: %s\n", strings.Join(drawn, " "))
}

// loop runs the steps, checking "lost" after each and settling every settleEvery steps and at the end.
func (s *soak) loop(ctx context.Context) error {
	fmt.Printf("soak: %d steps, seed %d, namespaces %s, controller logs %s/controller-{0,1}.log\n",
		s.o.steps, s.o.seed, strings.Join(namespaces, ","), s.o.workDir)
	for s.step = 1; s.step <= s.o.steps; s.step++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		notes := s.supervisePlane(ctx)
		if s.ctl.down && s.step >= s.ctl.upAt {
			notes = append(notes, s.bringBack(ctx))
		}
		notes = append(notes, s.ctl.supervise(ctx)...)
		if n := s.pinBackOn(ctx); n != "" {
			notes = append(notes, n)
		}
		for _, n := range notes {
			fmt.Printf("      note: %s\n", n)
		}
		s.watchReplicas(ctx)
		p := s.choose()
		s.countDrawn(p)
		if p.w != nil && p.w.pinned && (p.a == actPromote || p.a == actAbort || p.a == actUndo || p.a == actHistory) {
			s.pinnedOps++
		}
		start := time.Now()
		outcome, err := s.execute(ctx, p)
		if err != nil {
			s.errors++
			outcome = "ERROR " + err.Error()
		}
		target := "-"
		if p.w != nil {
			target = p.w.describe()
		}
		fmt.Printf("step %3d  %-17s %-44s %s (%s)\n", s.step, p.a, target, outcome, time.Since(start).Round(100*time.Millisecond))
		s.watchReplicas(ctx)
		s.report(s.checkStep(ctx))
		if s.step%s.o.settleEvery == 0 || s.step == s.o.steps {
			s.checkpoint(ctx)
		}
	}
	s.step = s.o.steps
	s.trig.events = s.trigEvents(ctx)
	return nil
}

// checkpoint brings a killed controller back and waits for everything to settle, then judges leaks.
func (s *soak) checkpoint(ctx context.Context) {
	notes := s.supervisePlane(ctx)
	if s.ctl.down {
		notes = append(notes, s.bringBack(ctx))
	}
	notes = append(notes, s.ctl.supervise(ctx)...)
	if err := s.ctl.waitReady(ctx, 2*time.Minute); err != nil {
		notes = append(notes, "controller not ready: "+err.Error())
	}
	for _, n := range notes {
		fmt.Printf("      note: %s\n", n)
	}
	s.watchReplicas(ctx)
	leaked, unattached := s.leaked, s.unattachedN
	took := s.settle(ctx)
	outcome := "settled"
	if s.leaked > leaked || s.unattachedN > unattached {
		outcome = fmt.Sprintf("%d leaked, %d unattached", s.leaked-leaked, s.unattachedN-unattached)
	}
	fmt.Printf("check     %-17s %-44s %s (%s)\n", "settle", "all namespaces", outcome, took.Round(100*time.Millisecond))
}

// supervisePlane restarts control-plane components (and the Argo Rollouts controller) of a cluster
// the soak started that have exited, as a node's kubelet would, and says so.
func (s *soak) supervisePlane(ctx context.Context) []string {
	dead, err := s.c.DeadComponents()
	if err != nil {
		return []string{"checking the control plane: " + err.Error()}
	}
	if len(dead) == 0 {
		return nil
	}
	s.planeRestarts += len(dead)
	note := fmt.Sprintf("%s not running (logs: %s); restarted", strings.Join(dead, ", "), filepath.Join(filepath.Dir(s.c.Kubeconfig), "logs"))
	if err := s.c.RestartComponents(ctx, io.Discard); err != nil {
		s.errors++
		note = fmt.Sprintf("%s not running; restarting failed: %v", strings.Join(dead, ", "), err)
	}
	return []string{note}
}

func (s *soak) bringBack(ctx context.Context) string {
	if err := s.ctl.startAll(ctx); err != nil {
		s.errors++
		return "restarting the controller after ctl-kill: " + err.Error()
	}
	start := time.Now()
	if err := s.ctl.waitReady(ctx, 2*time.Minute); err != nil {
		return "controller restarted after ctl-kill, not ready: " + err.Error()
	}
	return fmt.Sprintf("controller restarted after ctl-kill, leader ready in %s", time.Since(start).Round(100*time.Millisecond))
}

func (s *soak) execute(ctx context.Context, p plan) (string, error) {
	fault := isFault(p.a) // executed faults are counted; a leader-kill that found no leader is not
	defer func() {
		if fault {
			s.faults[string(p.a)]++
		}
	}()
	w := p.w
	switch p.a {
	case actConfig:
		return s.configChange(ctx, w, p.which)
	case actImage:
		w.image = fmt.Sprintf("nginx:1.%d", 100+s.step)
		if err := s.apply(ctx, w); err != nil {
			return "", err
		}
		return w.image + ", " + s.observed(ctx, w, time.Minute), nil
	case actPromote:
		if err := s.c.Promote(ctx, w.ns, w.name); err != nil {
			return "", err
		}
		return s.editAfter(ctx, w, "promoted")
	case actAbort:
		if err := s.c.Abort(ctx, w.ns, w.name); err != nil {
			return "", err
		}
		return s.editAfter(ctx, w, "aborted")
	case actUndo:
		rs, err := s.undo(ctx, w)
		if err != nil {
			return "", err
		}
		if rs == "" {
			return "no previous revision: nothing done", nil
		}
		return s.editAfter(ctx, w, "back to "+rs+"'s template, "+s.observed(ctx, w, time.Minute))
	case actHistory:
		return s.history(ctx, w, p.limit)
	case actCronRun:
		name, err := s.jobFromCronJob(ctx, w)
		if err != nil {
			return "", err
		}
		return "Job " + name, nil
	case actSpotKill:
		return s.spotKill(ctx, p.picks)
	case actDelete:
		if err := s.remove(ctx, w); err != nil {
			return "", err
		}
		return "deleted (background propagation)", nil
	case actRecreate:
		return s.recreate(ctx, w, p.reuse)
	case actCfgDelete:
		names := append(w.configMaps(), w.secrets()...)
		return s.deleteInUse(ctx, w, names[index(p.picks[0], len(names))])
	case actPinConfig:
		return s.pinConfig(ctx, w)
	case actCanaryKill:
		return s.canaryKill(ctx, w, p.picks[0])
	case actPinToggle:
		return s.pinToggle(ctx, p.ns, s.step+p.downFor)
	case actTrigEdit, actTrigRevert, actTrigBurst, actTrigPaused, actTrigRestart:
		return s.trigStep(ctx, p)
	case actWebhookPolicy:
		return s.webhookPolicy(ctx)
	case actWebhookKill:
		s.pin.disrupted.open(time.Now())
		killed, err := s.ctl.killServing(ctx)
		if err != nil {
			return "", err
		}
		if killed == nil {
			fault = false
			return "no replica runs: nothing killed", nil
		}
		if err := s.ctl.waitReady(ctx, 2*time.Minute); err != nil {
			return "", fmt.Errorf("replica %d killed; no ready leader: %w", killed.i, err)
		}
		return fmt.Sprintf("replica %d (serving the webhook, failurePolicy %s) killed and restarted", killed.i, s.pin.policy), nil
	case actCertRotate:
		return s.certRotate(ctx)
	case actBundleWipe:
		return s.bundleWipe(ctx)
	case actCtlKill:
		s.pin.disrupted.open(time.Now())
		s.ctl.killAll(s.step + p.downFor)
		return fmt.Sprintf("both replicas killed (-9); back at step %d", s.step+p.downFor), nil
	case actOutageDeploy:
		return s.outageDeploy(ctx, w, s.step+p.downFor)
	case actCRDDelete:
		return s.crdDelete(ctx)
	case actTableDelete:
		return s.tableDelete(ctx, p.ns, p.picks[0])
	case actLeaderKill:
		start := time.Now()
		s.pin.disrupted.open(start)
		killed, err := s.ctl.killLeader(ctx)
		if err != nil {
			return "", err
		}
		if killed == nil {
			fault = false
			return "no replica held the Lease: nothing killed", nil
		}
		if err := s.ctl.waitReady(ctx, 2*time.Minute); err != nil {
			return "", fmt.Errorf("replica %d killed; no new leader: %w", killed.i, err)
		}
		leader := "a replica"
		if l := s.ctl.leader(ctx); l != nil {
			leader = fmt.Sprintf("replica %d", l.i)
		}
		return fmt.Sprintf("replica %d killed and restarted; %s leads after %s", killed.i, leader, time.Since(start).Round(100*time.Millisecond)), nil
	case actAPIServer:
		start := time.Now()
		s.pin.disrupted.open(start)
		if s.admissionPolicy() {
			for _, ns := range namespaces {
				s.pin.tablesAway[ns].open(start)
			}
			defer s.policiesBack(ctx)
		}
		if err := s.c.RestartAPIServer(ctx, io.Discard); err != nil {
			return "", err
		}
		back := time.Since(start)
		if s.ctl.down {
			return fmt.Sprintf("kube-apiserver back after %s (the controller is down since ctl-kill)", back.Round(100*time.Millisecond)), nil
		}
		notes := s.ctl.supervise(ctx)
		if err := s.ctl.waitReady(ctx, 2*time.Minute); err != nil {
			return "", fmt.Errorf("kube-apiserver back after %s; controller not ready: %w", back.Round(100*time.Millisecond), err)
		}
		out := fmt.Sprintf("kube-apiserver back after %s, controller ready after %s", back.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
		if len(notes) > 0 {
			out += "; " + strings.Join(notes, "; ")
		}
		return out, nil
	}
	return "", fmt.Errorf("unknown action %q", p.a)
}

// configChange makes a new revision of the workload's own ConfigMap, or of its namespace's shared
// ConfigMap or Secret, and deploys it to every workload that uses it.
func (s *soak) configChange(ctx context.Context, w *app, which string) (string, error) {
	var name string
	var users []*app
	switch which {
	case "own":
		name = s.revision(w.ns, w.name+"-cm", false)
		w.own, users = name, []*app{w}
	case "shared":
		name = s.revision(w.ns, "shared-cm", false)
		s.ns[w.ns].shared = name
		for _, u := range s.targets(func(u *app) bool { return u.exists && u.ns == w.ns && u.shared != "" }) {
			u.shared = name
			users = append(users, u)
		}
	case "secret":
		name = s.revision(w.ns, "shared-secret", true)
		s.ns[w.ns].secret = name
		for _, u := range s.targets(func(u *app) bool { return u.exists && u.ns == w.ns && u.secret != "" }) {
			u.secret = name
			users = append(users, u)
		}
	}
	var out []string
	for i, u := range users {
		if err := s.apply(ctx, u); err != nil {
			if i == 0 && errors.Is(err, errNotApplied) {
				// Nothing uses the new revision: take it back, or it would count as leaked.
				if derr := s.deleteConfig(ctx, w.ns, name); derr != nil {
					err = fmt.Errorf("%w (and deleting the unused %s: %w)", err, name, derr)
				}
			}
			return "", fmt.Errorf("deploying %s to %s: %w", name, u.name, err)
		}
		out = append(out, u.name+": "+s.observed(ctx, u, time.Minute))
	}
	return fmt.Sprintf("%s %s -> %s", which, name, strings.Join(out, "; ")), nil
}

// history sets a low revisionHistoryLimit and deploys an image change, so old revisions are pruned;
// for a CronJob, all but the newest limit Jobs are deleted.
func (s *soak) history(ctx context.Context, w *app, limit int32) (string, error) {
	if w.kind == cronJob {
		deleted, err := s.pruneJobs(ctx, w, int(limit))
		if err != nil {
			return "", err
		}
		if len(deleted) == 0 {
			return fmt.Sprintf("keep %d Jobs: none to delete", limit), nil
		}
		return fmt.Sprintf("keep %d Jobs: deleted %s", limit, strings.Join(deleted, ", ")), nil
	}
	w.historyLimit = int32p(limit)
	if err := s.setHistoryLimit(ctx, w, limit); err != nil {
		return "", err
	}
	w.image = fmt.Sprintf("nginx:1.%d", 100+s.step)
	if err := s.apply(ctx, w); err != nil {
		return "", err
	}
	return fmt.Sprintf("revisionHistoryLimit %d, %s, %s", limit, w.image, s.observed(ctx, w, time.Minute)), nil
}

// recreate brings a deleted workload back, with the config it had (a reinstall of the same values:
// the same revision names, which may still exist, held or on their way out) or with new revisions.
func (s *soak) recreate(ctx context.Context, w *app, reuse bool) (string, error) {
	if err := s.waitGone(ctx, w); err != nil {
		return "", err
	}
	how := "same config"
	switch {
	case !reuse && w.pinned:
		how = "new content"
		s.bumpPins(w)
		if !w.trigger {
			w.checksum = s.pinChecksum(w)
		}
		s.pin.changes++
	case !reuse:
		how = "new config"
		w.own = s.revision(w.ns, w.name+"-cm", false)
		if w.shared != "" {
			w.shared = s.ns[w.ns].shared
		}
		if w.secret != "" {
			w.secret = s.ns[w.ns].secret
		}
	}
	if err := s.create(ctx, w); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (%s), %s", how, strings.Join(append(w.configMaps(), w.secrets()...), ", "), s.observed(ctx, w, time.Minute)), nil
}

// deleteInUse deletes a config object the workload uses, as `helm upgrade` without keep or a
// `kubectl delete` does: in-use protection must hold it. It first waits (bounded) for our finalizer,
// since an object the controller has not seen yet is not protected (docs/controller.md).
func (s *soak) deleteInUse(ctx context.Context, w *app, name string) (string, error) {
	secret := s.configs[w.ns+"/"+name].secret
	k := refs.ConfigMap
	if secret {
		k = refs.Secret
	}
	if err := s.c.WaitProtected(ctx, time.Minute, w.ns, k, name); err != nil {
		return "", fmt.Errorf("not deleted: %w", err)
	}
	if err := s.deleteConfig(ctx, w.ns, name); err != nil {
		return "", err
	}
	held, err := s.c.Held(ctx, w.ns, k, name)
	if err != nil {
		return "", err // gone: the lost check says more
	}
	if !held {
		return "", fmt.Errorf("%s %s deleted and not held", k, name)
	}
	return fmt.Sprintf("%s %s deleted: held", k, name), nil
}

// spotKill deletes pods at once (grace period 0), as when spot nodes are reclaimed.
func (s *soak) spotKill(ctx context.Context, picks []uint64) (string, error) {
	var pods []corev1.Pod
	for _, ns := range namespaces {
		list, err := s.c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				pods = append(pods, p)
			}
		}
	}
	if len(pods) == 0 {
		return "no running pods", nil
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name })
	killed := map[string]bool{}
	var names []string
	zero := int64(0)
	for _, v := range picks {
		p := pods[index(v, len(pods))]
		key := p.Namespace + "/" + p.Name
		if killed[key] {
			continue
		}
		killed[key] = true
		if err := s.c.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return "", err
		}
		names = append(names, key)
	}
	return fmt.Sprintf("deleted %s (of %d running)", strings.Join(names, ", "), len(pods)), nil
}

// shutdown stops the controllers and removes their webhook configuration (it would refuse pods of
// the soak namespaces with nothing to answer); on a cluster the soak did not start (and without
// -keep) it releases and deletes its namespaces.
func (s *soak) shutdown(ctx context.Context) {
	s.ctl.stop()
	s.trig.watch.close()
	s.pin.entries.close()
	if s.admissionPolicy() {
		if err := policy.DeletePolicies(ctx, s.c.Kube, webhookConfiguration); err != nil {
			fmt.Fprintf(os.Stderr, "soak: deleting the admission policies: %v\n", err)
		}
	}
	if err := s.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhookConfiguration, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "soak: deleting the webhook configuration: %v\n", err)
	}
	if s.c.Owned() || s.o.keep {
		return
	}
	if r := s.bin.Run(ctx, []string{"LOG_LEVEL=warn"}, "release", "-n", strings.Join(namespaces, ",")); r.Code != 0 {
		fmt.Fprintf(os.Stderr, "soak: releasing the namespaces: %s\n", r)
	}
	for _, ns := range append([]string{leaseNamespace}, namespaces...) {
		_ = s.c.DeleteNamespace(ctx, ns)
	}
}

func (s *soak) summary(took time.Duration) {
	var faults []string
	total := 0
	for _, a := range faultActions {
		faults = append(faults, fmt.Sprintf("%s=%d", a, s.faults[string(a)]))
		total += s.faults[string(a)]
	}
	var pinning []string
	for _, a := range pinningActions {
		pinning = append(pinning, fmt.Sprintf("%s=%d", a, s.drawn[a]))
	}
	judged, bestEffort := 0, 0
	for _, r := range s.pin.revisions {
		if r.bestEffort {
			bestEffort++
		} else {
			judged++
		}
	}
	fmt.Printf("\nfaults: %s; unattached (not counted below): %d; retained by a CronJob (by design, not counted below): %d; controller replicas that exited on their own: %d; cluster components restarted: %d; Job mode failures: %d; step errors: %d; took %s; logs in %s\n",
		strings.Join(faults, " "), s.unattachedN, s.retained, s.crashes, s.planeRestarts, s.jobFailures, s.errors, took.Round(time.Second), s.o.workDir)
	admission := fmt.Sprintf("webhook failurePolicy now %s; CA rotations completed %d, caBundle wipes %d; serving certificates every %s",
		s.pin.policy, s.pin.rotations, len(s.pin.wiped), certValidity*2/3)
	if s.admissionPolicy() {
		admission = fmt.Sprintf("admission: policy (the API server pins); pod creations refused while their revision's entry was missing %d", s.pin.waitedRefusals())
	}
	fmt.Printf("pinning: steps drawn %s, promote/abort/undo/history of pinned workloads %d; revisions of pinned workloads %d judged, %d best effort (created with pinning off); pinned content changes %d; pods reading a pinned object by its own name as allowed (pinning off, or the webhook down under Ignore) %d; %s\n",
		strings.Join(pinning, " "), s.pinnedOps, judged, bestEffort, s.pin.changes, len(s.pin.allowed), admission)
	fmt.Println(s.trigSummary())
	fmt.Printf("steps=%d faults=%d lost=%d leaked=%d unpinned=%d wrong=%d refused=%d revisions=%d/%d seed=%d\n", s.step, total, s.lost, s.leaked, s.unpinned, s.wrong, s.refused,
		s.trig.right, s.trig.judged, s.o.seed)
}
