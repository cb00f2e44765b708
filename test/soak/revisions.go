package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// The revisions of a workload as the soak reads them: ReplicaSets of Rollouts and Deployments,
// ControllerRevisions of StatefulSets and DaemonSets; which one is current; and a watch that sees every
// revision created, so that none made and pruned between two readings goes uncounted.

// revInfo is one revision of a workload.
type revInfo struct {
	uid      types.UID
	name     string
	created  time.Time
	deleting bool
	tmpl     *corev1.PodTemplateSpec
}

func (r *revInfo) String() string {
	if r == nil {
		return "none"
	}
	return r.name
}

// workloadRevisions is a workload with its revisions, read from the API server.
type workloadRevisions struct {
	owner types.UID
	// template is the pod template its revisions are made from now: the workload's own, or for a
	// Rollout with workloadRef the Deployment's it names.
	template *corev1.PodTemplateSpec
	// current is the revision its controller runs its template with; nil while it has not caught up.
	current *revInfo
	all     []*revInfo
}

func (wr *workloadRevisions) byUID(uid types.UID) *revInfo {
	for _, r := range wr.all {
		if r.uid == uid {
			return r
		}
	}
	return nil
}

// revisionsOf reads the workload and its revisions. Current: a Rollout's status.currentPodHash, a
// Deployment's ReplicaSet of its template (workload.Resolve, as the other checks read them), a
// StatefulSet's status.updateRevision, a DaemonSet's ControllerRevision of the highest number (its
// controller renumbers the one it runs), each once its controller observed the latest generation.
func (s *soak) revisionsOf(ctx context.Context, w *app) (*workloadRevisions, error) {
	switch w.kind {
	case canary, workloadRef, deployment:
		res, err := s.resolve(ctx, w)
		if err != nil {
			return nil, err
		}
		out := &workloadRevisions{owner: res.Owner.GetUID()}
		switch {
		case res.Deployment != nil:
			out.template = &res.Deployment.Spec.Template
		case res.Rollout != nil && res.Rollout.Spec.Template != nil:
			out.template = res.Rollout.Spec.Template
		}
		for _, rs := range res.Owned {
			out.all = append(out.all, &revInfo{uid: rs.UID, name: rs.Name, created: rs.CreationTimestamp.Time,
				deleting: rs.DeletionTimestamp != nil, tmpl: &rs.Spec.Template})
		}
		if rs, err := res.Current(); err == nil {
			out.current = out.byUID(rs.UID)
		}
		return out, nil
	case statefulSet, daemonSet:
		var meta metav1.ObjectMeta
		var tmpl corev1.PodTemplateSpec
		var observed bool
		var update string
		if w.kind == statefulSet {
			o, err := s.c.Kube.AppsV1().StatefulSets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			meta, tmpl, observed, update = o.ObjectMeta, o.Spec.Template, o.Status.ObservedGeneration >= o.Generation, o.Status.UpdateRevision
		} else {
			o, err := s.c.Kube.AppsV1().DaemonSets(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			meta, tmpl, observed = o.ObjectMeta, o.Spec.Template, o.Status.ObservedGeneration >= o.Generation
		}
		crs, err := s.c.ControllerRevisions(ctx, w.ns, meta.UID)
		if err != nil {
			return nil, err
		}
		out := &workloadRevisions{owner: meta.UID, template: &tmpl}
		var newest *appsv1.ControllerRevision
		for i := range crs {
			cr := &crs[i]
			t, err := controllerRevisionTemplate(cr)
			if err != nil {
				return nil, fmt.Errorf("ControllerRevision %s/%s: %w", w.ns, cr.Name, err)
			}
			out.all = append(out.all, &revInfo{uid: cr.UID, name: cr.Name, created: cr.CreationTimestamp.Time, deleting: cr.DeletionTimestamp != nil, tmpl: t})
			if cr.DeletionTimestamp == nil && (newest == nil || cr.Revision > newest.Revision) {
				newest = cr
			}
		}
		switch {
		case !observed:
		case w.kind == statefulSet && update != "":
			for _, r := range out.all {
				if r.name == update {
					out.current = r
				}
			}
		case w.kind == daemonSet && newest != nil:
			out.current = out.byUID(newest.UID)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s has no revisions the soak reads", w.kind)
}

// base is what tells two templates of a workload apart for the soak, but for the config-hash
// annotation: the images, the config they read, their labels (less the revision hash labels their
// controllers add) and annotations (less ours). A revert goes back to a revision whose template has the
// base of the workload's template (docs/config-starts.md).
func base(t *corev1.PodTemplateSpec) string {
	if t == nil {
		return ""
	}
	var parts []string
	for _, c := range t.Spec.Containers {
		parts = append(parts, "image="+c.Image)
	}
	for ref := range templateRefs(&t.Spec) {
		parts = append(parts, "reads="+ref)
	}
	for k, v := range t.Labels {
		if k != appsv1.DefaultDeploymentUniqueLabelKey && k != workload.RolloutHashLabel && k != appsv1.ControllerRevisionHashLabelKey {
			parts = append(parts, "label="+k+"="+v)
		}
	}
	for k, v := range t.Annotations {
		if k != api.ConfigHashAnnotation {
			parts = append(parts, "annotation="+k+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// revisionWatch sees every ReplicaSet and ControllerRevision created in the soak namespaces, by owner.
type revisionWatch struct {
	mu    sync.Mutex
	owned map[types.UID]map[types.UID]string // owner uid -> revision uid -> name
	stop  chan struct{}
}

// watchRevisions starts the watch (an informer per namespace) and waits until it has listed.
func (s *soak) watchRevisions(ctx context.Context) (*revisionWatch, error) {
	rw := &revisionWatch{owned: map[types.UID]map[types.UID]string{}, stop: make(chan struct{})}
	add := func(obj any) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		owner := metav1.GetControllerOfNoCopy(m)
		if owner == nil {
			return
		}
		rw.mu.Lock()
		defer rw.mu.Unlock()
		if rw.owned[owner.UID] == nil {
			rw.owned[owner.UID] = map[types.UID]string{}
		}
		rw.owned[owner.UID][m.GetUID()] = m.GetName()
	}
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(s.c.Kube, 0, informers.WithNamespace(ns))
		for _, inf := range []cache.SharedIndexInformer{f.Apps().V1().ReplicaSets().Informer(), f.Apps().V1().ControllerRevisions().Informer()} {
			if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: add}); err != nil {
				return nil, err
			}
			synced = append(synced, inf.HasSynced)
		}
		f.Start(rw.stop)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		close(rw.stop)
		return nil, fmt.Errorf("the revision watch did not sync")
	}
	return rw, nil
}

// of returns the uids of the revisions of owner seen so far.
func (rw *revisionWatch) of(owner types.UID) map[types.UID]string {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	out := map[types.UID]string{}
	for uid, name := range rw.owned[owner] {
		out[uid] = name
	}
	return out
}

// seen reports whether the watch has seen revision uid of owner.
func (rw *revisionWatch) seen(owner, uid types.UID) bool {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	_, ok := rw.owned[owner][uid]
	return ok
}

func (rw *revisionWatch) close() {
	if rw != nil {
		close(rw.stop)
	}
}
