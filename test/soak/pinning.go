package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/webhookcert"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Zero-touch pinning in the soak: pin-canary (a Rollout with the write-up's canary) and pin-web (a
// Deployment) read their own ConfigMap <name>-pin (and, by the seed, Secret <name>-pin-secret),
// labelled configmap-attacher.io/pin and changed in place, with the checksum of their content on the
// pod template. The invariants, judged with the soak's own reading of pods and objects:
//
//   unpinned: a pod of a revision reads a pinned object by its own name although it was created while
//             its namespace had pinning on and the webhook could answer (under Fail it always must);
//             or a revision not pinned within a minute while the controller ran.
//   wrong:    a pod reads a snapshot whose content is not what its pinned object held when the pod's
//             revision was created (the soak records that content when it first sees the revision;
//             it changes a pinned object only once the workload's current revision is pinned, so no
//             revision can be created between a change and its record).
//   refused:  a pod creation refused by the webhook while the failurePolicy was Ignore; or, under
//             either policy, while every replica was ready and the caBundle in place: refused by a
//             webhook that should have answered (a certificate rotation must never refuse a pod).
//
// Revisions created while their namespace had pinning off are pinned on a best-effort basis
// (docs/pinning.md): their content is not judged.

// checksumAnnotation carries the pinned content's checksum on the pod template (Helm's practice).
const checksumAnnotation = "checksum/pin"

// webhookConfiguration is the MutatingWebhookConfiguration the controller registers by URL.
const webhookConfiguration = "configmap-attacher-soak"

// settleMargin widens every window: creation timestamps have whole seconds, and the API server and the
// controller see a change a moment after the soak made it.
const settleMargin = 2 * time.Second

type window struct{ from, to time.Time } // to zero: still open

func (w window) covers(t time.Time) bool {
	return !t.Before(w.from.Add(-settleMargin)) && (w.to.IsZero() || !t.After(w.to.Add(settleMargin)))
}

// windows is a list of time intervals.
type windows []window

func (ws windows) covers(t time.Time) bool {
	for _, w := range ws {
		if w.covers(t) {
			return true
		}
	}
	return false
}

func (ws *windows) open(t time.Time) {
	if n := len(*ws); n == 0 || !(*ws)[n-1].to.IsZero() {
		*ws = append(*ws, window{from: t})
	}
}

func (ws *windows) close(t time.Time) {
	if n := len(*ws); n > 0 && (*ws)[n-1].to.IsZero() {
		(*ws)[n-1].to = t
	}
}

func (ws windows) isOpen() bool { return len(ws) > 0 && ws[len(ws)-1].to.IsZero() }

// pinningState is what the pinning invariants are judged against.
type pinningState struct {
	objects map[string]map[string]string // pinned object "Kind/ns/name" -> its content now
	on      map[string]bool              // namespace -> pinning enabled
	off     map[string]*windows          // namespace -> when pinning was off
	// disrupted: some controller replica (hence possibly the registered webhook) was not ready.
	disrupted windows
	// ignore: the failurePolicy was Ignore; switching: a rolling restart changing it.
	ignore, switching windows
	// wiped: the caBundle was emptied (bundle-wipe), until the leader restored it.
	wiped windows
	// rotations: cert-rotate steps that ended with both replicas serving the new CA's certificate.
	rotations         int
	policy            string
	revisions         map[types.UID]*pinnedRevision
	offNS             string // the namespace pin-toggle turned pinning off in, until step onAt
	onAt              int
	toggles, switches int
	changes           int
	// allowed are the pods seen reading a pinned object by its own name as they may: created with
	// pinning off, or while the webhook could not answer under Ignore (failing open).
	allowed map[string]bool
	// Policy mode (policy.go): when each entry was first seen, and the refusals (by Event) while a
	// revision's entry was missing.
	entries *entries
	waited  map[string]int32
	// tablesAway: by namespace, when the API server could not apply its tables: they (or one of them)
	// were missing (crd-delete, table-delete), until the soak saw them put back; or kube-apiserver
	// restarted (apiserver-restart), until its policies read the tables again (WaitPolicyEffective).
	tablesAway map[string]*windows
}

// pinnedRevision is a revision of a pinned workload as the soak first saw it.
type pinnedRevision struct {
	name       string
	content    map[string]map[string]string // pinned object "Kind/ns/name" -> content it was created with
	bestEffort bool                         // created while its namespace had pinning off
}

func newPinningState() *pinningState {
	p := &pinningState{objects: map[string]map[string]string{}, on: map[string]bool{}, off: map[string]*windows{},
		policy: "Fail", revisions: map[types.UID]*pinnedRevision{}, allowed: map[string]bool{}, waited: map[string]int32{}, tablesAway: map[string]*windows{}}
	for _, ns := range namespaces {
		p.off[ns] = &windows{}
		p.tablesAway[ns] = &windows{}
	}
	return p
}

func (w *app) pinName(secret bool) string {
	if secret {
		return w.name + "-pin-secret"
	}
	return w.name + "-pin"
}

// pinKeys are the "Kind/ns/name" of the workload's pinned objects.
func (w *app) pinKeys() []string {
	keys := []string{"ConfigMap/" + w.ns + "/" + w.pinName(false)}
	if w.pinSecret {
		keys = append(keys, "Secret/"+w.ns+"/"+w.pinName(true))
	}
	return keys
}

// bumpPins gives the workload's pinned objects new content (in the model): what a config change in a
// chart does (with pinChecksum on the template) or an edit in place (config-triggered workloads).
func (s *soak) bumpPins(w *app) {
	for _, key := range w.pinKeys() {
		s.pin.objects[key] = s.pinContent(key, 0)
	}
	s.noteState(w)
}

// pinContent is new content for the pinned object key: the step (and, within a burst, the edit) makes
// it unlike any before.
func (s *soak) pinContent(key string, edit int) map[string]string {
	return map[string]string{"object": key, "step": fmt.Sprint(s.step), "edit": fmt.Sprint(edit), "seed": fmt.Sprint(s.o.seed)}
}

func (s *soak) pinChecksum(w *app) string {
	all := map[string]string{}
	for _, key := range w.pinKeys() {
		for k, v := range s.pin.objects[key] {
			all[key+"/"+k] = v
		}
	}
	return framework.Checksum(all)
}

// putPins writes the model's content into the pinned objects, creating them if needed, in place
// otherwise (an Update: the soak owns them).
func (s *soak) putPins(ctx context.Context, w *app) error {
	for _, key := range w.pinKeys() {
		if err := s.putPin(ctx, w, key); err != nil {
			return err
		}
	}
	return nil
}

// putPin writes the model's content into one pinned object of the workload: its data and nothing
// else, as `kubectl edit` does (an unchanged content is no write at all).
func (s *soak) putPin(ctx context.Context, w *app, key string) error {
	kind, name := "ConfigMap", w.pinName(false)
	if strings.HasPrefix(key, "Secret/") {
		kind, name = "Secret", w.pinName(true)
	}
	data := s.pin.objects[key]
	labels := map[string]string{api.PinLabel: api.PinValue}
	err := retryAPI(func() error {
		if kind == "Secret" {
			sec, err := s.c.Kube.CoreV1().Secrets(w.ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = s.c.Kube.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, StringData: data}, metav1.CreateOptions{})
				return err
			}
			if err != nil {
				return err
			}
			sec.Data, sec.StringData = nil, data
			_, err = s.c.Kube.CoreV1().Secrets(w.ns).Update(ctx, sec, metav1.UpdateOptions{})
			return err
		}
		cm, err := s.c.Kube.CoreV1().ConfigMaps(w.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = s.c.Kube.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: data}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		cm.Data = data
		_, err = s.c.Kube.CoreV1().ConfigMaps(w.ns).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("writing pinned %s: %w", key, err)
	}
	return nil
}

// retryAPI retries a few times: the API server may be restarting, or an Update may conflict.
func retryAPI(f func() error) error {
	var err error
	for attempt := 0; attempt < 6; attempt++ {
		if err = f(); err == nil {
			return nil
		}
		time.Sleep(time.Second)
	}
	return err
}

// setPinning labels the namespace for pinning, or removes the label, and records when.
func (s *soak) setPinning(ctx context.Context, ns string, on bool) error {
	value := "null"
	if on {
		value = fmt.Sprintf("%q", api.PinningEnabled)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, api.PinningNamespaceLabel, value)
	if err := retryAPI(func() error {
		_, err := s.c.Kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}); err != nil {
		return err
	}
	now := time.Now()
	if on {
		s.pin.off[ns].close(now)
	} else {
		s.pin.off[ns].open(now)
	}
	s.pin.on[ns] = on
	return nil
}

// pinConfig changes the workload's pinned objects in place and deploys the new checksum, once its
// current revision is pinned (a pipeline waits for the previous deploy to start). On a
// config-triggered workload it is a judged change (trigger.go): one revision, the deploy's.
func (s *soak) pinConfig(ctx context.Context, w *app) (string, error) {
	if w.trigger {
		return s.pinConfigTriggered(ctx, w)
	}
	wr, err := s.waitPinned(ctx, w, time.Minute)
	if err != nil {
		return "", fmt.Errorf("not changed: %w", err)
	}
	s.bumpPins(w)
	w.checksum = s.pinChecksum(w)
	if err := s.putPins(ctx, w); err != nil {
		return "", err
	}
	s.pin.changes++
	if err := s.setTemplate(ctx, w, w.template()); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s changed in place after %s was pinned, checksum %.8s, %s", strings.Join(w.pinKeys(), ", "), wr.current.name, w.checksum, s.observed(ctx, w, time.Minute)), nil
}

// waitPinned waits until the workload's current revision owns a snapshot of each of its pinned
// objects (or its namespace has pinning off), recording the revision, and returns the workload's
// revisions (current set). A revision the controller did not pin in time is reported as unpinned.
func (s *soak) waitPinned(ctx context.Context, w *app, timeout time.Duration) (*workloadRevisions, error) {
	var wr *workloadRevisions
	var why string
	err := framework.Eventually(ctx, timeout, "the current revision of "+w.String()+" pinned", func(ctx context.Context) (bool, string, error) {
		got, err := s.revisionsOf(ctx, w)
		if err != nil {
			return false, err.Error(), nil
		}
		if got.current == nil {
			return false, "its controller has not caught up with its template", nil
		}
		wr = got
		cur := wr.current
		s.recordRevision(cur.uid, cur.name, cur.created, w)
		if !s.pin.on[w.ns] {
			return true, "", nil
		}
		for _, key := range w.pinKeys() {
			kind, _, original := splitKey(key)
			if ok, err := s.ownsSnapshot(ctx, w.ns, kind, original, cur.uid); err != nil || !ok {
				why = fmt.Sprintf("%s owns no snapshot of %s yet", cur.name, original)
				return false, why, nil
			}
		}
		return true, "", nil
	})
	if err != nil && wr != nil && why != "" {
		kind := "ReplicaSet"
		if !w.kind.hasReplicaSets() {
			kind = "ControllerRevision"
		}
		s.report([]violation{{kind: "unpinned", key: kind + "/" + w.ns + "/" + wr.current.name, id: "revision " + w.ns + "/" + wr.current.name,
			detail: fmt.Sprintf("not pinned within %s while the controller ran (%s)", timeout, why)}})
	}
	return wr, err
}

// ownsSnapshot reports whether revision uid owns a snapshot of original: an object named
// <original>-<hash> with the snapshot label, owned by it.
func (s *soak) ownsSnapshot(ctx context.Context, ns, kind, original string, uid types.UID) (bool, error) {
	opts := metav1.ListOptions{LabelSelector: api.SnapshotLabel + "=" + api.SnapshotValue}
	var metas []metav1.ObjectMeta
	if kind == "Secret" {
		list, err := s.c.Kube.CoreV1().Secrets(ns).List(ctx, opts)
		if err != nil {
			return false, err
		}
		for _, o := range list.Items {
			metas = append(metas, o.ObjectMeta)
		}
	} else {
		list, err := s.c.Kube.CoreV1().ConfigMaps(ns).List(ctx, opts)
		if err != nil {
			return false, err
		}
		for _, o := range list.Items {
			metas = append(metas, o.ObjectMeta)
		}
	}
	for _, m := range metas {
		if !isSnapshotName(m.Name, original) {
			continue
		}
		for _, o := range m.OwnerReferences {
			if o.UID == uid {
				return true, nil
			}
		}
	}
	return false, nil
}

// isSnapshotName: <original>-<10 lowercase alphanumerics>, the name the soak expects a snapshot of
// original to have.
func isSnapshotName(name, original string) bool {
	hash, ok := strings.CutPrefix(name, original+"-")
	if !ok || len(hash) != 10 {
		return false
	}
	for _, c := range hash {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

func splitKey(key string) (kind, ns, name string) {
	parts := strings.SplitN(key, "/", 3)
	return parts[0], parts[1], parts[2]
}

func (s *soak) resolve(ctx context.Context, w *app) (*workload.Resolved, error) {
	k := workload.Rollout
	if w.kind == deployment {
		k = workload.Deployment
	}
	return workload.Resolve(ctx, workload.ClientSource{Kube: s.c.Kube, Dynamic: s.c.Dynamic}, workload.Ref{Kind: k, Namespace: w.ns, Name: w.name})
}

// recordRevision records, the first time the soak sees a revision of a pinned workload, the content
// its pinned objects hold now: what it was created with, since the soak changes them only once the
// current revision is recorded and pinned.
func (s *soak) recordRevision(uid types.UID, name string, created time.Time, w *app) {
	if _, ok := s.pin.revisions[uid]; ok {
		return
	}
	r := &pinnedRevision{name: w.ns + "/" + name, content: map[string]map[string]string{},
		bestEffort: !s.pin.on[w.ns] || s.pin.off[w.ns].covers(created)}
	for _, key := range w.pinKeys() {
		r.content[key] = s.pin.objects[key]
	}
	s.pin.revisions[uid] = r
}

// canaryKill deletes a pod of the pinned Rollout with grace 0: one of its stable revision while a
// canary is in progress (the write-up's spot node), else any of its pods.
func (s *soak) canaryKill(ctx context.Context, w *app, pick uint64) (string, error) {
	res, err := s.resolve(ctx, w)
	if err != nil {
		return "", err
	}
	stable, current := res.Rollout.Status.StableRS, res.Rollout.Status.CurrentPodHash
	target, what := res.ByHash(current), "current"
	if stable != "" && stable != current {
		target, what = res.ByHash(stable), "stable (canary in progress)"
	}
	if target == nil {
		return "no ReplicaSet to take a pod from", nil
	}
	pods, err := s.c.PodsOf(ctx, target)
	if err != nil {
		return "", err
	}
	if len(pods) == 0 {
		return fmt.Sprintf("%s ReplicaSet %s has no pod", what, target.Name), nil
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	p := pods[index(pick, len(pods))]
	zero := int64(0)
	if err := s.c.Kube.CoreV1().Pods(w.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return "", err
	}
	return fmt.Sprintf("deleted %s of the %s ReplicaSet %s", p.Name, what, target.Name), nil
}

// pinToggle turns pinning off in a namespace until step onAt (pinBackOn turns it on again).
func (s *soak) pinToggle(ctx context.Context, ns string, onAt int) (string, error) {
	if err := s.setPinning(ctx, ns, false); err != nil {
		return "", err
	}
	s.pin.offNS, s.pin.onAt = ns, onAt
	s.pin.toggles++
	return fmt.Sprintf("pinning disabled in %s; enabled again at step %d", ns, onAt), nil
}

// pinBackOn turns pinning on again in the namespace pin-toggle turned it off in, once its time came.
func (s *soak) pinBackOn(ctx context.Context) string {
	if s.pin.offNS == "" || s.step < s.pin.onAt {
		return ""
	}
	ns := s.pin.offNS
	s.pin.offNS = ""
	if err := s.setPinning(ctx, ns, true); err != nil {
		s.errors++
		return "enabling pinning again in " + ns + ": " + err.Error()
	}
	return "pinning enabled again in " + ns
}

// webhookPolicy switches the webhook's failurePolicy (Fail <-> Ignore) by a rolling restart of the
// replicas with the other -webhook-failure-policy, as a chart upgrade would.
func (s *soak) webhookPolicy(ctx context.Context) (string, error) {
	next := "Ignore"
	if s.pin.policy == "Ignore" {
		next = "Fail"
	}
	start := time.Now()
	s.pin.switching.open(start)
	s.pin.disrupted.open(start)
	err := s.ctl.rollingRestart(ctx, next)
	now := time.Now()
	if next == "Ignore" {
		s.pin.ignore.open(now)
	} else {
		s.pin.ignore.close(start)
	}
	s.pin.switching.close(now)
	s.pin.policy = next
	s.pin.switches++
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("failurePolicy %s after a rolling restart (%s)", next, now.Sub(start).Round(100*time.Millisecond)), nil
}

// watchReplicas keeps the disrupted windows: open from the last time every replica was ready until
// they all are again.
func (s *soak) watchReplicas(ctx context.Context) {
	now := time.Now()
	if s.ctl.allReady(ctx) {
		s.pin.disrupted.close(now)
		s.ctl.lastAllReady = now
		return
	}
	s.pin.disrupted.open(s.ctl.lastAllReady)
}

// unpinnedAllowed reports whether a pod created at t in ns may read a pinned object by its own name:
// its namespace had pinning off, or the webhook may not have answered under Ignore.
func (p *pinningState) unpinnedAllowed(ns string, t time.Time) bool {
	if p.off[ns].covers(t) {
		return true
	}
	return p.unanswered(t) && (p.ignore.covers(t) || p.switching.covers(t))
}

// unanswered reports whether the webhook may not have answered at t: a replica not ready, the
// caBundle wiped, or a rolling restart.
func (p *pinningState) unanswered(t time.Time) bool {
	return p.disrupted.covers(t) || p.wiped.covers(t) || p.switching.covers(t)
}

// contentLabel names content the soak wrote by where it was written: the step, and the edit within a
// config-triggered step (pinContent).
func contentLabel(m map[string]string) string {
	return "step " + m["step"] + " edit " + m["edit"]
}

// pinUse is one reading by a pod of a pinned object, by its own name or through a snapshot.
type pinUse struct {
	pod, podUID, owner string
	ownerUID           types.UID // the pod's revision ("" when not found)
	podOwnerUID        types.UID // the pod's controller
	revisionName       string    // a StatefulSet's or DaemonSet's pod: its ControllerRevision's name
	created            time.Time
	pinKey, read       string // the pinned object, and the name the pod reads it by
}

// pinningIn judges the pinning invariants on one reading of the cluster.
func (s *soak) pinningIn(snap *snapshot) []violation {
	var out []violation
	for _, w := range s.fleet {
		if !w.pinned {
			continue
		}
		for _, r := range snap.revisions {
			if r.ns == w.ns && r.ownerName == w.name && r.ownerKind == w.kind.apiKind() {
				s.recordRevision(r.uid, r.name, r.created, w)
			}
		}
	}
	for _, u := range snap.pinUses {
		rev := s.pin.revisions[u.ownerUID]
		if u.read == u.pinKey[strings.LastIndex(u.pinKey, "/")+1:] {
			if _, ns, _ := splitKey(u.pinKey); s.pin.unpinnedAllowed(ns, u.created) {
				s.pin.allowed[u.podUID] = true
			} else {
				out = append(out, violation{kind: "unpinned", key: "Pod/" + u.pod, id: u.podUID,
					detail: fmt.Sprintf("reads %s by its own name; created %s with pinning on and the webhook answering (owner %s)",
						u.pinKey, u.created.Format(time.TimeOnly), u.owner)})
			}
			continue
		}
		if rev == nil || rev.bestEffort {
			continue
		}
		kind, ns, _ := splitKey(u.pinKey)
		got, exists := snap.data[kind+"/"+ns+"/"+u.read]
		if !exists {
			continue // missing: the lost check reports it
		}
		if want := rev.content[u.pinKey]; !maps.Equal(got, want) {
			out = append(out, violation{kind: "wrong", key: "Pod/" + u.pod, id: u.podUID + "/" + u.read,
				detail: fmt.Sprintf("reads %s (%s %s) through %s; its revision %s was created with %s",
					u.pinKey, kind, contentLabel(got), u.read, rev.name, contentLabel(want))})
		}
	}
	for _, e := range snap.refusals {
		why := ""
		if s.admissionPolicy() {
			var bad bool
			if why, bad = s.policyRefusal(e); !bad {
				continue
			}
			out = append(out, violation{kind: "refused", key: e.object, id: e.id,
				detail: fmt.Sprintf("pod creation refused %s (%d×, %s–%s): %s", why, e.count,
					e.first.Format(time.TimeOnly), e.last.Format(time.TimeOnly), e.message)})
			continue
		}
		switch {
		case s.pin.ignore.covers(e.first) && s.pin.ignore.covers(e.last) && !s.pin.switching.covers(e.first) && !s.pin.switching.covers(e.last):
			why = "under failurePolicy Ignore"
		case !s.pin.unanswered(e.first) && !s.pin.unanswered(e.last):
			why = "while every replica was ready and the caBundle in place"
		default:
			continue
		}
		out = append(out, violation{kind: "refused", key: e.object, id: e.id,
			detail: fmt.Sprintf("pod creation refused %s (%d×, %s–%s): %s", why, e.count,
				e.first.Format(time.TimeOnly), e.last.Format(time.TimeOnly), e.message)})
	}
	return out
}

// caBundle is the webhook configuration's caBundle (nil when unreadable).
func (s *soak) caBundle(ctx context.Context) []byte {
	cfg, err := s.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookConfiguration, metav1.GetOptions{})
	if err != nil || len(cfg.Webhooks) == 0 {
		return nil
	}
	return cfg.Webhooks[0].ClientConfig.CABundle
}

// certRotate deletes the webhook's certificate Secret while both replicas serve: the leader adds a new
// CA to the caBundle, and once it is registered both replicas serve certificates it signed. It opens
// no window: a pod refused meanwhile counts.
func (s *soak) certRotate(ctx context.Context) (string, error) {
	before := s.caBundle(ctx)
	start := time.Now()
	if err := s.c.Kube.CoreV1().Secrets(leaseNamespace).Delete(ctx, webhookConfiguration+"-webhook-tls", metav1.DeleteOptions{}); err != nil {
		return "", err
	}
	var newCA *x509.Certificate
	if err := framework.Eventually(ctx, time.Minute, "a new CA in the caBundle", func(ctx context.Context) (bool, string, error) {
		for _, c := range webhookcert.ParseBundle(s.caBundle(ctx)) {
			if !slices.ContainsFunc(webhookcert.ParseBundle(before), c.Equal) {
				newCA = c
				return true, "", nil
			}
		}
		return false, "none yet", nil
	}); err != nil {
		return "", err
	}
	registered := time.Since(start)
	roots := x509.NewCertPool()
	roots.AddCert(newCA)
	if err := framework.Eventually(ctx, 2*time.Minute, "both replicas serving a certificate of the new CA", func(ctx context.Context) (bool, string, error) {
		for _, r := range s.ctl.replicas {
			leaf, err := framework.ServedCertificate(fmt.Sprintf("127.0.0.1:%d", r.port))
			if err != nil {
				return false, fmt.Sprintf("replica %d: %v", r.i, err), nil
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
				return false, fmt.Sprintf("replica %d: %v", r.i, err), nil
			}
		}
		return true, "", nil
	}); err != nil {
		return "", err
	}
	s.pin.rotations++
	return fmt.Sprintf("certificate Secret deleted: new CA %s in the caBundle after %s, both replicas serve its certificates after %s",
		webhookcert.Fingerprint(newCA), registered.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond)), nil
}

// bundleWipe empties the caBundle, as `helm upgrade --force` or Argo CD's Replace=true would; the leader
// restores it. The webhook may fail until then (the wiped window).
func (s *soak) bundleWipe(ctx context.Context) (string, error) {
	start := time.Now()
	s.pin.wiped.open(start)
	defer func() { s.pin.wiped.close(time.Now()) }()
	patch := `[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":""}]`
	if _, err := s.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, webhookConfiguration, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return "", err
	}
	if err := framework.Eventually(ctx, time.Minute, "the caBundle restored", func(ctx context.Context) (bool, string, error) {
		return len(s.caBundle(ctx)) > 0, "empty", nil
	}); err != nil {
		return "", err
	}
	return fmt.Sprintf("caBundle emptied; restored after %s", time.Since(start).Round(time.Millisecond)), nil
}
