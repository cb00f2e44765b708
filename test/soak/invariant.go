package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The invariant, read from the API server alone and judged with the soak's own reading of pod
// specs (not the controller's code):
//
//   lost:   a ConfigMap or Secret that a live Pod (not Succeeded/Failed) or the pod template of a
//           live (not being deleted) ReplicaSet, ControllerRevision, Deployment, StatefulSet,
//           DaemonSet, Job, CronJob or Rollout in a soak namespace references does not exist. An
//           object being deleted but held by a finalizer exists: that is the point.
//   leaked: after settling, an opted-in object that nothing live references still exists.
//
// Not leaked, reported as retained: an opted-in object that nothing references, owned by a live
// CronJob that stopped using it before any Job ran with it. The controller keeps that reference by
// design (docs/controller.md: without it the object would have no owner and never be collected; the
// controller deletes no config itself), so the object goes with the CronJob.

// templateRefs returns "Kind/name" of every ConfigMap and Secret a pod spec references: volumes,
// projected sources, envFrom and env valueFrom, of init, regular and ephemeral containers.
func templateRefs(spec *corev1.PodSpec) map[string]bool {
	out := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			out["ConfigMap/"+v.ConfigMap.Name] = true
		}
		if v.Secret != nil {
			out["Secret/"+v.Secret.SecretName] = true
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					out["ConfigMap/"+src.ConfigMap.Name] = true
				}
				if src.Secret != nil {
					out["Secret/"+src.Secret.Name] = true
				}
			}
		}
	}
	env := func(envFrom []corev1.EnvFromSource, vars []corev1.EnvVar) {
		for _, e := range envFrom {
			if e.ConfigMapRef != nil {
				out["ConfigMap/"+e.ConfigMapRef.Name] = true
			}
			if e.SecretRef != nil {
				out["Secret/"+e.SecretRef.Name] = true
			}
		}
		for _, e := range vars {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				out["ConfigMap/"+r.Name] = true
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				out["Secret/"+r.Name] = true
			}
		}
	}
	for _, c := range spec.InitContainers {
		env(c.EnvFrom, c.Env)
	}
	for _, c := range spec.Containers {
		env(c.EnvFrom, c.Env)
	}
	for _, c := range spec.EphemeralContainers {
		env(c.EnvFrom, c.Env)
	}
	return out
}

// configObject is a ConfigMap or Secret as the checks see it.
type configObject struct {
	key        string // "Kind/ns/name"
	uid        string
	optedIn    bool
	snapshot   bool // a pinning snapshot: needed while a revision owning it lives
	deleting   bool
	finalizers []string
	owners     []metav1.OwnerReference
}

// snapshot is one reading of the soak namespaces: config objects first, then their users, so a
// config missing while a user is live was gone while something used it (config is always created
// before any template names it).
type snapshot struct {
	configs map[string]*configObject // by "Kind/ns/name"
	users   map[string][]string      // "Kind/ns/name" of a config -> "Kind ns/name" of live users
	live    map[string]bool          // uids of live workloads and revisions (for describing owners)
	// revisions the controller follows, with what they reference
	followed []revisionUse
	// Pinning (pinning.go): the content of every snapshot by "Kind/ns/name", the ReplicaSets, every
	// pod's reading of a pinned object, and the pod creations the pinning webhook made fail.
	data      map[string]map[string]string
	revisions []ownedRevision
	pinUses   []pinUse
	refusals  []refusal
	at        time.Time // when the reading began
}

// ownedRevision is a ReplicaSet or ControllerRevision and the workload controlling it.
type ownedRevision struct {
	uid                            types.UID
	ns, name, ownerKind, ownerName string
	created                        time.Time
}

// refusal is a FailedCreate Event naming the pinning webhook.
type refusal struct {
	object, id, message string
	count               int32
	first, last         time.Time
}

func (s *soak) read(ctx context.Context) (*snapshot, error) {
	snap := &snapshot{configs: map[string]*configObject{}, users: map[string][]string{}, live: map[string]bool{}, data: map[string]map[string]string{},
		at: time.Now()}
	core, apps, batch := s.c.Kube.CoreV1(), s.c.Kube.AppsV1(), s.c.Kube.BatchV1()
	all := metav1.ListOptions{}
	for _, ns := range namespaces {
		cms, err := core.ConfigMaps(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range cms.Items {
			snap.addConfig("ConfigMap", &o.ObjectMeta)
			if o.Labels[api.SnapshotLabel] == api.SnapshotValue {
				snap.data["ConfigMap/"+ns+"/"+o.Name] = o.Data
			}
		}
		secrets, err := core.Secrets(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range secrets.Items {
			snap.addConfig("Secret", &o.ObjectMeta)
			if o.Labels[api.SnapshotLabel] == api.SnapshotValue {
				data := map[string]string{}
				for k, v := range o.Data {
					data[k] = string(v)
				}
				snap.data["Secret/"+ns+"/"+o.Name] = data
			}
		}
	}
	for _, ns := range namespaces {
		pods, err := core.Pods(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range pods.Items {
			if o.Status.Phase != corev1.PodSucceeded && o.Status.Phase != corev1.PodFailed {
				snap.addUser("Pod", &o.ObjectMeta, &o.Spec, true)
				s.addPinUses(snap, &o)
			}
		}
		rss, err := apps.ReplicaSets(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range rss.Items {
			snap.addUser("ReplicaSet", &o.ObjectMeta, &o.Spec.Template.Spec, false)
			if owner := metav1.GetControllerOf(&o); owner != nil {
				snap.revisions = append(snap.revisions, ownedRevision{uid: o.UID, ns: ns, name: o.Name, ownerKind: owner.Kind, ownerName: owner.Name, created: o.CreationTimestamp.Time})
			}
		}
		events, err := core.Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreate"})
		if err != nil {
			return nil, err
		}
		for _, e := range events.Items {
			if isPinningRefusal(e.Message) {
				first, last := e.FirstTimestamp.Time, e.LastTimestamp.Time
				if first.IsZero() {
					first = e.EventTime.Time
				}
				if last.IsZero() {
					last = first
				}
				snap.refusals = append(snap.refusals, refusal{object: e.InvolvedObject.Kind + "/" + ns + "/" + e.InvolvedObject.Name,
					id: fmt.Sprintf("%s/%d", e.UID, e.Count), message: e.Message, count: e.Count, first: first, last: last})
			}
		}
		crs, err := apps.ControllerRevisions(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range crs.Items {
			t, err := controllerRevisionTemplate(&o)
			if err != nil {
				return nil, fmt.Errorf("ControllerRevision %s/%s: %w", ns, o.Name, err)
			}
			snap.addUser("ControllerRevision", &o.ObjectMeta, &t.Spec, false)
			if owner := metav1.GetControllerOf(&o); owner != nil {
				snap.revisions = append(snap.revisions, ownedRevision{uid: o.UID, ns: ns, name: o.Name, ownerKind: owner.Kind, ownerName: owner.Name, created: o.CreationTimestamp.Time})
				snap.pinRevision(ns, o.Name, owner.UID, o.UID)
			}
		}
		deps, err := apps.Deployments(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range deps.Items {
			snap.addUser("Deployment", &o.ObjectMeta, &o.Spec.Template.Spec, false)
		}
		stss, err := apps.StatefulSets(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range stss.Items {
			snap.addUser("StatefulSet", &o.ObjectMeta, &o.Spec.Template.Spec, false)
		}
		dss, err := apps.DaemonSets(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range dss.Items {
			snap.addUser("DaemonSet", &o.ObjectMeta, &o.Spec.Template.Spec, false)
		}
		jobs, err := batch.Jobs(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range jobs.Items {
			snap.addUser("Job", &o.ObjectMeta, &o.Spec.Template.Spec, false)
		}
		cjs, err := batch.CronJobs(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for _, o := range cjs.Items {
			snap.addUser("CronJob", &o.ObjectMeta, &o.Spec.JobTemplate.Spec.Template.Spec, false)
		}
		ros, err := s.c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).List(ctx, all)
		if err != nil {
			return nil, err
		}
		for i := range ros.Items {
			u := &ros.Items[i]
			t, err := rolloutTemplate(u)
			if err != nil {
				return nil, fmt.Errorf("Rollout %s/%s: %w", ns, u.GetName(), err)
			}
			meta := metav1.ObjectMeta{Name: u.GetName(), Namespace: ns, UID: u.GetUID(), DeletionTimestamp: u.GetDeletionTimestamp()}
			spec := &corev1.PodSpec{}
			if t != nil {
				spec = &t.Spec
			}
			snap.addUser("Rollout", &meta, spec, false)
		}
	}
	return snap, nil
}

// pinningWebhookName is the webhook the API server names in a refusal.
const pinningWebhookName = "pin-pods.configmap-attacher.io"

// addPinUses records how a pod reads each pinned object of its namespace it references: by the
// object's own name, or through a snapshot (<name>-<hash>). A pod's revision is its ReplicaSet, or for
// a StatefulSet's or DaemonSet's pod the ControllerRevision its controller-revision-hash label names
// (a StatefulSet labels with the revision's name, a DaemonSet with the hash alone): pinRevision finds
// it once the ControllerRevisions are read.
func (s *soak) addPinUses(snap *snapshot, p *corev1.Pod) {
	owner := metav1.GetControllerOf(p)
	if owner == nil {
		return
	}
	revision, revisionName := owner.UID, ""
	if owner.Kind == "StatefulSet" || owner.Kind == "DaemonSet" {
		revision, revisionName = "", p.Labels[appsv1.ControllerRevisionHashLabelKey]
		if owner.Kind == "DaemonSet" {
			revisionName = owner.Name + "-" + revisionName
		}
	}
	for ref := range templateRefs(&p.Spec) {
		kind, name, _ := strings.Cut(ref, "/")
		for key := range s.pin.objects {
			k, ns, original := splitKey(key)
			if k != kind || ns != p.Namespace || (name != original && !isSnapshotName(name, original)) {
				continue
			}
			snap.pinUses = append(snap.pinUses, pinUse{pod: p.Namespace + "/" + p.Name, podUID: string(p.UID),
				owner: owner.Kind + " " + owner.Name, ownerUID: revision, podOwnerUID: owner.UID, revisionName: revisionName,
				created: p.CreationTimestamp.Time, pinKey: key, read: name})
		}
	}
}

// pinRevision sets the revision of the pin uses of pods of a StatefulSet or DaemonSet (owner) whose
// label names ControllerRevision name.
func (snap *snapshot) pinRevision(ns, name string, owner, uid types.UID) {
	for i := range snap.pinUses {
		u := &snap.pinUses[i]
		if u.ownerUID == "" && u.podOwnerUID == owner && u.revisionName == name && strings.HasPrefix(u.pod, ns+"/") {
			u.ownerUID = uid
		}
	}
}

func (snap *snapshot) addConfig(kind string, m *metav1.ObjectMeta) {
	snap.configs[kind+"/"+m.Namespace+"/"+m.Name] = &configObject{
		key: kind + "/" + m.Namespace + "/" + m.Name, uid: string(m.UID), optedIn: api.OptedIn(m.Labels),
		snapshot: m.Labels[api.SnapshotLabel] == api.SnapshotValue,
		deleting: m.DeletionTimestamp != nil, finalizers: m.Finalizers, owners: m.OwnerReferences,
	}
}

// addUser records what a live object references. A pod being deleted still runs until the kubelet
// is done with it, so it counts; a workload or revision being deleted does not (docs/controller.md).
func (snap *snapshot) addUser(kind string, m *metav1.ObjectMeta, spec *corev1.PodSpec, pod bool) {
	if m.DeletionTimestamp != nil && !pod {
		return
	}
	snap.live[string(m.UID)] = true
	rev := followed(kind, m)
	for ref := range templateRefs(spec) {
		k, name, _ := strings.Cut(ref, "/")
		key := k + "/" + m.Namespace + "/" + name
		snap.users[key] = append(snap.users[key], kind+" "+m.Namespace+"/"+m.Name)
		if rev {
			snap.followed = append(snap.followed, revisionUse{config: key, uid: string(m.UID), name: kind + " " + m.Name})
		}
	}
}

// followed reports whether the controller attaches config to this object (docs/controller.md): a
// ReplicaSet its -replicaset-selector matches (not the Job mode's), a ControllerRevision of a
// StatefulSet or DaemonSet, a Job, a CronJob. (No bare pods in the soak.)
func followed(kind string, m *metav1.ObjectMeta) bool {
	switch kind {
	case "ReplicaSet":
		return m.Labels[attachLabel] != "job"
	case "ControllerRevision":
		o := metav1.GetControllerOfNoCopy(m)
		return o != nil && (o.Kind == "StatefulSet" || o.Kind == "DaemonSet")
	case "Job", "CronJob":
		return true
	}
	return false
}

// revisionUse is one (config object, revision the controller attaches it to) pair.
type revisionUse struct {
	config string // "Kind/ns/name"
	uid    string // the revision's
	name   string // "Kind name" of the revision
}

// violation is one lost or leaked object, with what shows why.
type violation struct {
	kind   string // "lost" or "leaked"
	key    string // "Kind/ns/name"
	id     string // what it is counted once by
	detail string
}

// checkStep reads the cluster and returns the objects lost (missing while referenced) and the
// pinning invariants broken (pinning.go); report counts each once per run.
func (s *soak) checkStep(ctx context.Context) []violation {
	snap, err := s.readRetrying(ctx)
	if err != nil {
		return nil
	}
	return append(s.confirmLost(ctx, snap, s.lostIn(snap)), s.pinningIn(snap)...)
}

func (s *soak) lostIn(snap *snapshot) []violation {
	var out []violation
	for _, key := range sortedKeys(snap.users) {
		if _, exists := snap.configs[key]; exists {
			continue
		}
		users := snap.users[key]
		sort.Strings(users)
		out = append(out, violation{kind: "lost", key: key, id: key,
			detail: "missing, referenced by " + strings.Join(users, ", ")})
	}
	return out
}

// confirmLost keeps the lost objects that are still missing. One the reading missed because it was
// created after config objects were listed and before its users were is not lost: a pinning snapshot,
// which the webhook creates while it admits the first pod of a revision.
func (s *soak) confirmLost(ctx context.Context, snap *snapshot, vs []violation) []violation {
	var out []violation
	for _, v := range vs {
		kind, ns, name := splitKey(v.key)
		var m *metav1.ObjectMeta
		if kind == "Secret" {
			if o, err := s.c.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				m = &o.ObjectMeta
			}
		} else if o, err := s.c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			m = &o.ObjectMeta
		}
		// Creation timestamps have whole seconds: created in the second the reading began, or later.
		if m != nil && !m.CreationTimestamp.Time.Before(snap.at.Truncate(time.Second)) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// leakCandidates are opted-in objects nothing live references (yet: the garbage collector and the
// controller may still be on their way).
func (s *soak) leakCandidates(snap *snapshot) []violation {
	var out []violation
	for _, key := range sortedKeys(snap.configs) {
		o := snap.configs[key]
		if !o.optedIn || len(snap.users[key]) > 0 || (o.snapshot && ownedByLive(o, snap)) {
			continue // a snapshot is needed while a revision owning it lives (a rollback recreates its pods)
		}
		var owners []string
		for _, ref := range o.owners {
			state := "gone"
			if snap.live[string(ref.UID)] {
				state = "live"
			}
			owners = append(owners, fmt.Sprintf("%s %s (%s)", ref.Kind, ref.Name, state))
		}
		if len(owners) == 0 {
			owners = []string{"none"}
		}
		d := fmt.Sprintf("exists, referenced by nothing live; owners: %s; finalizers: %v; being deleted: %v",
			strings.Join(owners, ", "), o.finalizers, o.deleting)
		kind := "leaked"
		if retainedByCronJob(o, snap) {
			kind = "retained"
		}
		out = append(out, violation{kind: kind, key: key, id: o.uid, detail: d})
	}
	return out
}

func ownedByLive(o *configObject, snap *snapshot) bool {
	for _, ref := range o.owners {
		if snap.live[string(ref.UID)] {
			return true
		}
	}
	return false
}

// retainedByCronJob reports whether o's only owners are live CronJobs: what the controller keeps when
// a CronJob's template moved on before any Job used the object.
func retainedByCronJob(o *configObject, snap *snapshot) bool {
	if len(o.owners) == 0 {
		return false
	}
	for _, ref := range o.owners {
		if ref.Kind != "CronJob" || !snap.live[string(ref.UID)] {
			return false
		}
	}
	return true
}

// unattached are the controller's first promise not (yet) kept: an opted-in object, not being
// deleted, that a revision the controller follows references without an ownerReference to it. Not
// counted in the exit status (the brief is lost and leaked); reported because a missing reference is
// a leak or a loss waiting for its revision to go.
func (s *soak) unattached(snap *snapshot) []violation {
	var out []violation
	for _, r := range snap.followed {
		o, ok := snap.configs[r.config]
		if !ok || !o.optedIn || o.deleting {
			continue
		}
		owned := false
		for _, ref := range o.owners {
			owned = owned || string(ref.UID) == r.uid
		}
		if !owned {
			out = append(out, violation{kind: "unattached", key: r.config, id: o.uid + "/" + r.uid,
				detail: "referenced by " + r.name + " but not owned by it"})
		}
	}
	return out
}

// readRetrying reads the cluster, waiting out an API server restart.
func (s *soak) readRetrying(ctx context.Context) (*snapshot, error) {
	var snap *snapshot
	err := framework.Eventually(ctx, 2*time.Minute, "reading the soak namespaces", func(ctx context.Context) (bool, string, error) {
		var err error
		snap, err = s.read(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		fmt.Printf("      check skipped: %v\n", err)
		s.errors++
	}
	return snap, err
}

// report prints violations not reported before and counts them.
func (s *soak) report(vs []violation) {
	for _, v := range vs {
		if s.seen[v.kind][v.id] {
			continue
		}
		s.seen[v.kind][v.id] = true
		switch v.kind {
		case "lost":
			s.lost++
			fmt.Printf("      LOST   %s: %s (step %d, seed %d)\n", v.key, v.detail, s.step, s.o.seed)
		case "leaked":
			s.leaked++
			fmt.Printf("      LEAKED %s: %s (step %d, seed %d)\n", v.key, v.detail, s.step, s.o.seed)
		case "unpinned":
			s.unpinned++
			fmt.Printf("      UNPINNED %s: %s (step %d, seed %d)\n", v.key, v.detail, s.step, s.o.seed)
		case "wrong":
			s.wrong++
			fmt.Printf("      WRONG  %s: %s (step %d, seed %d)\n", v.key, v.detail, s.step, s.o.seed)
		case "refused":
			s.refused++
			fmt.Printf("      REFUSED %s: %s (step %d, seed %d)\n", v.key, v.detail, s.step, s.o.seed)
		case "revisions":
			fmt.Printf("      REVISIONS %s: %s (step %d, seed %d)\n", v.key, v.detail, s.step, s.o.seed)
		case "retained":
			s.retained++
			fmt.Printf("      retained %s: %s: kept by its CronJob by design, goes with it (step %d, seed %d)\n", v.key, v.detail, s.step, s.o.seed)
		default:
			s.unattachedN++
			fmt.Printf("      unattached %s: %s (step %d, seed %d)\n", v.key, v.detail, s.step, s.o.seed)
		}
	}
}

// settle polls until no opted-in object is left that nothing references and every followed revision
// owns what it uses (what was reported before is not waited for again), checking "lost" on every
// reading, and reports what is left after the settle time as leaked (or unattached). It returns how
// long it took.
func (s *soak) settle(ctx context.Context) time.Duration {
	start := time.Now()
	deadline := start.Add(s.o.settle)
	for {
		snap, err := s.readRetrying(ctx)
		if err != nil {
			return time.Since(start)
		}
		s.report(s.confirmLost(ctx, snap, s.lostIn(snap)))
		s.report(s.pinningIn(snap))
		var pending []violation
		for _, v := range append(s.leakCandidates(snap), s.unattached(snap)...) {
			if v.kind == "retained" {
				s.report([]violation{v}) // by design: nothing to wait for
				continue
			}
			if !s.seen[v.kind][v.id] {
				pending = append(pending, v)
			}
		}
		if len(pending) == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.report(pending)
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
