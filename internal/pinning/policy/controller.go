package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Name names the table controller in logs and metrics.
const Name = "pin-table"

// Reasons of the Events it records on revisions.
const (
	// ReasonTableFull: the namespace's tables cannot hold the revision's entry.
	ReasonTableFull = "PinTableFull"
	// ReasonWaiting: the revision reads an object that does not exist yet (and not optionally).
	ReasonWaiting = "PinWaiting"
)

// waitRetry is how soon a revision waiting for an object that does not exist is looked at again: the
// object's creation brings no event when it is not labelled for pinning.
const waitRetry = 2 * time.Second

// errNotYet: the entry needs a snapshot the cache does not show yet (its snapshot event brings the
// namespace back).
var errNotYet = errors.New("a snapshot is not in the cache yet")

// Options of the table controller.
type Options struct {
	// Take: this controller snapshots what a revision's entry needs (policy mode, where nothing else
	// does). Without it (webhook mode, where the controller and the webhook take them), entries record
	// the snapshots the cache shows, so that a switch to policy mode finds every revision's entry.
	Take bool
	// MaxTableBytes bounds a table's spec (DefaultMaxTableBytes when 0).
	MaxTableBytes int
	// Namespaces watched (nil: all).
	Namespaces []string
}

// Clients the table controller uses.
type Clients struct {
	Kube     kubernetes.Interface
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
}

// Controller keeps every pinning namespace's PinTable: an entry per live revision, written once the
// objects it references have been read from the API server, removed once the revision is gone. Keys:
// namespaces.
type Controller struct {
	caches  *caches.Caches
	clients Clients
	taker   *pinning.Taker
	events  record.EventRecorder
	opts    Options
	loop    *reconcile.Loop
	tables  *caches.Informer[*unstructured.Unstructured]
	start   []func(<-chan struct{})

	// written are the tables as this controller last wrote them, by namespace and name: the only
	// writer's view, newer than the cache until the cache catches up.
	mu      sync.Mutex
	written map[string]map[string]written

	writes   *prometheus.CounterVec
	overflow map[string]int // by namespace, the revisions refused an entry for size
}

// New wires the table controller to the caches (which must include the pinning caches). taker is used
// with Options.Take.
func New(c *caches.Caches, clients Clients, taker *pinning.Taker, events record.EventRecorder, m *metrics.Metrics, o Options) (*Controller, error) {
	if c.Pinning == nil {
		return nil, errors.New("pinning caches missing")
	}
	if o.MaxTableBytes <= 0 {
		o.MaxTableBytes = DefaultMaxTableBytes
	}
	ctl := &Controller{caches: c, clients: clients, taker: taker, events: events, opts: o,
		written: map[string]map[string]written{}, overflow: map[string]int{}}
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: ctl.sync, Metrics: m}

	namespaces := o.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var infs []caches.Source
	selector := labels.SelectorFromSet(labels.Set{TableLabel: TableValue}).String()
	for _, ns := range namespaces {
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(clients.Dynamic, 0, ns, func(lo *metav1.ListOptions) { lo.LabelSelector = selector })
		infs = append(infs, f.ForResource(GVR).Informer())
		ctl.start = append(ctl.start, f.Start)
	}
	ctl.tables = caches.NewInformer[*unstructured.Unstructured](infs...)

	byNamespace := ctl.enqueue
	handler := cache.ResourceEventHandlerFuncs{AddFunc: byNamespace, UpdateFunc: func(_, cur any) { byNamespace(cur) }, DeleteFunc: byNamespace}
	for _, kind := range []caches.Kind{caches.ReplicaSet, caches.ControllerRevision} {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandler(handler); err != nil {
				return nil, err
			}
		}
	}
	for _, inf := range c.Pinning.Pins {
		if err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	for _, inf := range c.Pinning.Snapshots {
		if err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	if err := ctl.tables.AddEventHandler(handler); err != nil {
		return nil, err
	}
	err := c.Pinning.Namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m, ok := caches.MetaOf(obj); ok && m.Labels[api.PinningNamespaceLabel] == api.PinningEnabled && ctl.inScope(m.Name) {
				ctl.loop.Queue.Add(m.Name)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, okO := caches.MetaOf(old)
			n, okN := caches.MetaOf(cur)
			if okO && okN && o.Labels[api.PinningNamespaceLabel] != n.Labels[api.PinningNamespaceLabel] && ctl.inScope(n.Name) {
				ctl.loop.Queue.Add(n.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if m != nil {
		ctl.writes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "configmap_attacher_pin_table_writes_total",
			Help: "Writes of PinTables (admission policy mode's table), by operation."}, []string{"op"})
		for _, op := range []string{"create", "update", "delete"} {
			ctl.writes.WithLabelValues(op)
		}
		m.Registry.MustRegister(ctl.writes)
		m.Gauge("configmap_attacher_pin_table_entries", "Revisions with an entry in the PinTables.", func() float64 { return float64(ctl.stats().entries) })
		m.Gauge("configmap_attacher_pin_table_bytes_max", "The largest PinTable's spec, bytes (a table is split per workload beyond -pinning-table-max-bytes).",
			func() float64 { return float64(ctl.stats().maxBytes) })
		m.Gauge("configmap_attacher_pin_table_overflow", "Revisions refused an entry because their PinTable is full: their pods are refused.",
			func() float64 {
				ctl.mu.Lock()
				defer ctl.mu.Unlock()
				n := 0
				for _, v := range ctl.overflow {
					n += v
				}
				return float64(n)
			})
	}
	return ctl, nil
}

// inScope reports whether the namespace is one this controller keeps tables in (-namespaces): the
// namespace cache is cluster-wide, and another release may keep the tables of the others.
func (c *Controller) inScope(ns string) bool {
	return len(c.opts.Namespaces) == 0 || slices.Contains(c.opts.Namespaces, ns)
}

// enqueue queues the namespace of a revision (as the caches keep it), a pinned object, a snapshot or
// a table.
func (c *Controller) enqueue(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch o := obj.(type) {
	case *caches.User:
		c.loop.Queue.Add(o.Namespace)
	case metav1.Object:
		c.loop.Queue.Add(o.GetNamespace())
	}
}

// Loop is the controller's queue and workers.
func (c *Controller) Loop() *reconcile.Loop { return c.loop }

// Start starts the tables' informers.
func (c *Controller) Start(stop <-chan struct{}) {
	for _, s := range c.start {
		s(stop)
	}
}

// HasSynced reports whether the tables' cache has synced.
func (c *Controller) HasSynced() bool { return c.tables.HasSynced() }

type stats struct{ entries, maxBytes int }

func (c *Controller) stats() stats {
	var s stats
	for _, u := range c.tables.List() {
		t, err := FromUnstructured(u)
		if err != nil {
			continue
		}
		s.entries += len(t.Spec.Revisions)
		s.maxBytes = max(s.maxBytes, t.Spec.size())
	}
	return s
}

func (c *Controller) sync(ctx context.Context, ns string) (reconcile.Result, error) {
	ctx = logging.NewContext(ctx, logging.FromContext(ctx).With("namespace", ns))
	if !c.inScope(ns) || !c.caches.Pinning.Enabled(ns) {
		// Pinning off (or never on): the policies do not look here. A table stays as it is, so that
		// turning pinning on again finds every revision that kept its entry answered at once (a table
		// made anew would leave the namespace's pods refused until it is).
		return reconcile.Result{}, nil
	}
	current, err := c.current(ns)
	if err != nil {
		return reconcile.Result{}, err
	}
	existing := map[string]Entry{}
	for _, t := range current {
		maps.Copy(existing, t.Spec.Revisions)
	}
	d := Desired{Entries: map[string]Entry{}, Routes: map[string]string{}}
	var res reconcile.Result
	var errs []error
	for _, u := range c.revisions(ns) {
		rev, _ := RevisionOf(string(u.Kind()), u.Name, u.UID, u.Owner)
		e, had := existing[rev.Key]
		var taken []string
		var wait string
		var err error
		if had {
			e, taken, err = c.refresh(ctx, u, e)
		} else {
			e, taken, wait, err = c.newEntry(ctx, u, rev)
		}
		switch {
		case errors.Is(err, errNotYet):
			res.RequeueAfter = waitRetry
			continue
		case err != nil:
			errs = append(errs, err)
			if had {
				d.Entries[rev.Key], d.Routes[rev.Key] = existing[rev.Key], rev.Route // keep what it had
			}
			continue
		case wait != "":
			c.event(u, corev1.EventTypeNormal, ReasonWaiting, "pods of this revision wait for "+wait+
				" to exist before configmap-attacher records what they read (they could not start without it)")
			res.RequeueAfter = waitRetry
			continue
		}
		if len(taken) > 0 {
			logging.FromContext(ctx).Info("pinned", "revision", rev.Kind+"/"+rev.Name, "snapshots", taken)
			c.event(u, corev1.EventTypeNormal, pinning.ReasonPinned, "pods of this revision read "+strings.Join(taken, ", "))
		}
		d.Entries[rev.Key], d.Routes[rev.Key] = e, rev.Route
	}
	// Entries of revisions the cache no longer shows: removed once the API server agrees they are gone.
	for key, e := range existing {
		if _, ok := d.Entries[key]; ok {
			continue
		}
		gone, route, err := c.gone(ctx, ns, key, e)
		if err != nil {
			errs = append(errs, err)
		}
		if !gone || err != nil {
			d.Entries[key], d.Routes[key] = e, route
			res.RequeueAfter = waitRetry
		}
	}
	p := plan(ns, current, d, c.opts.MaxTableBytes)
	c.reportOverflow(ns, p.Overflow)
	if err := c.apply(ctx, ns, p); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// revisions are the namespace's revisions the cache shows: ReplicaSets, and ControllerRevisions of
// StatefulSets and DaemonSets.
func (c *Controller) revisions(ns string) []*caches.User {
	var out []*caches.User
	for _, kind := range []caches.Kind{caches.ReplicaSet, caches.ControllerRevision} {
		inf, ok := c.caches.Users[kind]
		if !ok {
			continue
		}
		users, _ := inf.InNamespace(ns, func(u *caches.User) bool {
			_, ok := RevisionOf(string(u.Kind()), u.Name, u.UID, u.Owner)
			return ok
		})
		out = append(out, users...)
	}
	slices.SortFunc(out, func(a, b *caches.User) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

// newEntry is the first entry of a revision, from a consistent read of every object it references:
// a pin label put on in the same deploy as the revision is seen, whatever the cache shows yet. It
// waits (wait names what) while an object the revision cannot start without does not exist: created a
// moment later, labelled, its pods would otherwise have read it unpinned.
func (c *Controller) newEntry(ctx context.Context, u *caches.User, rev Revision) (e Entry, taken []string, wait string, err error) {
	e = Entry{Revision: rev.Kind + "/" + rev.Name}
	var missing []refs.Ref
	for _, r := range u.Refs {
		if snap, ok := c.caches.Pinning.Snapshot(u.Namespace, string(u.UID), r); ok {
			e.Pin(r, snap) // pinned before (the webhook, a previous leader): nothing to read
			continue
		}
		m, err := c.clients.Metadata.Resource(r.Kind.GVR()).Namespace(u.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, r)
			continue
		case err != nil:
			return e, nil, "", fmt.Errorf("reading %s %s/%s for %s: %w", r.Kind, u.Namespace, r.Name, e.Revision, err)
		}
		if !pinnable(m.Labels) {
			continue
		}
		snap, err := c.pin(ctx, u, r)
		switch {
		case errors.Is(err, pinning.ErrNotPinned):
			continue // the label went away meanwhile
		case apierrors.IsNotFound(err):
			missing = append(missing, r)
			continue
		case err != nil:
			return e, nil, "", err
		case snap == "":
			return e, nil, "", errNotYet // webhook mode: the taker's snapshot is on its way to the cache
		}
		e.Pin(r, snap)
		taken = append(taken, fmt.Sprintf("%s/%s -> %s", strings.ToLower(string(r.Kind)), r.Name, snap))
	}
	if len(missing) > 0 {
		needed, err := c.needed(ctx, u, missing)
		if err != nil {
			return e, nil, "", err
		}
		if len(needed) > 0 {
			return e, nil, strings.Join(needed, ", "), nil
		}
	}
	return e, taken, "", nil
}

// refresh brings an entry up to date with the cache: an object labelled since gets its snapshot, and
// a revision's pin that changed (a hand-deleted snapshot held for it, replaced) is followed. A mapping
// is never removed: the cache not showing a snapshot yet is no reason to unpin.
func (c *Controller) refresh(ctx context.Context, u *caches.User, e Entry) (Entry, []string, error) {
	out := Entry{Revision: e.Revision, ConfigMaps: maps.Clone(e.ConfigMaps), Secrets: maps.Clone(e.Secrets)}
	var taken []string
	for _, r := range u.Refs {
		if snap, ok := c.caches.Pinning.Snapshot(u.Namespace, string(u.UID), r); ok {
			out.Pin(r, snap)
			continue
		}
		if _, ok := out.Snapshot(r); ok {
			continue
		}
		obj, labelled := c.caches.Pinning.Pin(u.Namespace, r)
		if !labelled {
			continue
		}
		if m, ok := obj.(metav1.Object); !ok || !pinnable(m.GetLabels()) {
			continue
		}
		snap, err := c.pin(ctx, u, r)
		switch {
		case errors.Is(err, pinning.ErrNotPinned) || apierrors.IsNotFound(err) || (err == nil && snap == ""):
			continue
		case err != nil:
			return e, nil, err
		}
		out.Pin(r, snap)
		taken = append(taken, fmt.Sprintf("%s/%s -> %s", strings.ToLower(string(r.Kind)), r.Name, snap))
	}
	return out, taken, nil
}

// pin is the revision's snapshot of r: taken now in policy mode, as the cache shows it otherwise ("":
// not yet).
func (c *Controller) pin(ctx context.Context, u *caches.User, r refs.Ref) (string, error) {
	if !c.opts.Take {
		snap, _ := c.caches.Pinning.Snapshot(u.Namespace, string(u.UID), r)
		return snap, nil
	}
	return c.taker.Take(ctx, u.Revision(), r)
}

// needed are those of the missing objects the revision's pods cannot start without (a use that is not
// optional, in volumes or env), read from the revision itself.
func (c *Controller) needed(ctx context.Context, u *caches.User, missing []refs.Ref) ([]string, error) {
	var spec *corev1.PodSpec
	switch u.Kind() {
	case caches.ReplicaSet:
		rs, err := c.clients.Kube.AppsV1().ReplicaSets(u.Namespace).Get(ctx, u.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		spec = &rs.Spec.Template.Spec
	case caches.ControllerRevision:
		cr, err := c.clients.Kube.AppsV1().ControllerRevisions(u.Namespace).Get(ctx, u.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		t, err := caches.ControllerRevisionTemplate(cr)
		if err != nil {
			return nil, err
		}
		spec = &t.Spec
	}
	var out []string
	for _, r := range missing {
		for _, use := range refs.Uses(spec) {
			if use.Ref == r && use.Path.InVolumesOrEnv() && !use.Optional {
				out = append(out, strings.ToLower(string(r.Kind))+"/"+r.Name)
				break
			}
		}
	}
	return out, nil
}

// gone reports whether the revision of an entry the cache no longer shows is gone from the API
// server too (a new leader's cache, or a lagging one, may not show a revision created a moment ago),
// and its route.
func (c *Controller) gone(ctx context.Context, ns, key string, e Entry) (bool, string, error) {
	kind, name, _ := strings.Cut(e.Revision, "/")
	switch kind {
	case "ReplicaSet":
		rs, err := c.clients.Kube.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		rev, _ := RevisionOf(kind, rs.Name, rs.UID, metav1.GetControllerOf(rs))
		return rev.Key != key, rev.Route, nil
	case "ControllerRevision":
		cr, err := c.clients.Kube.AppsV1().ControllerRevisions(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		rev, ok := RevisionOf(kind, cr.Name, cr.UID, metav1.GetControllerOf(cr))
		return !ok || rev.Key != key, rev.Route, nil
	}
	return true, "", nil // not an entry of ours
}

// current are the namespace's tables: the cache's, or what this controller last wrote where the cache
// has not caught up with it.
func (c *Controller) current(ns string) (map[string]*Table, error) {
	out := map[string]*Table{}
	objs, err := c.tables.InNamespace(ns, func(*unstructured.Unstructured) bool { return true })
	if err != nil {
		return nil, err
	}
	for _, u := range objs {
		t, err := FromUnstructured(u)
		if err != nil {
			return nil, err
		}
		out[t.Name] = t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, w := range c.written[ns] {
		cached, ok := out[name]
		switch {
		case w.table == nil && ok && cached.UID == w.deleted:
			delete(out, name) // deleted by us; the cache still shows it
		case w.table != nil && (!ok || newer(w.table.ResourceVersion, cached.ResourceVersion)):
			out[name] = w.table
		}
	}
	return out, nil
}

// written is a table as this controller last wrote it, or the uid of the one it deleted.
type written struct {
	table   *Table
	deleted types.UID
}

// newer reports whether resourceVersion a is newer than b (etcd revisions, compared as numbers; an
// unknown form is never newer).
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// apply writes the plan in its order, remembering what it wrote.
func (c *Controller) apply(ctx context.Context, ns string, p Plan) error {
	res := c.clients.Dynamic.Resource(GVR).Namespace(ns)
	for _, w := range p.Writes {
		var out *unstructured.Unstructured
		var err error
		switch w.Op {
		case "delete":
			err = res.Delete(ctx, w.Table.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &w.Table.UID}})
			if apierrors.IsNotFound(err) {
				err = nil
			}
		case "create", "update":
			var obj *unstructured.Unstructured
			if obj, err = w.Table.toUnstructured(); err != nil {
				return err
			}
			if w.Op == "create" {
				out, err = res.Create(ctx, obj, metav1.CreateOptions{FieldManager: api.FieldManager})
			} else {
				out, err = res.Update(ctx, obj, metav1.UpdateOptions{FieldManager: api.FieldManager})
			}
		}
		if c.writes != nil {
			c.writes.WithLabelValues(w.Op).Inc()
		}
		c.remember(ns, w, out, err)
		if err != nil {
			return fmt.Errorf("%s PinTable %s/%s: %w", w.Op, ns, w.Table.Name, err)
		}
	}
	return nil
}

// remember keeps what was written (or forgets it on a conflict or NotFound: the cache is the truth
// then).
func (c *Controller) remember(ns string, w Write, out *unstructured.Unstructured, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.written[ns] == nil {
		c.written[ns] = map[string]written{}
	}
	switch {
	case err != nil:
		delete(c.written[ns], w.Table.Name)
	case w.Op == "delete":
		c.written[ns][w.Table.Name] = written{deleted: w.Table.UID}
	default:
		if t, err := FromUnstructured(out); err == nil {
			c.written[ns][w.Table.Name] = written{table: t}
		}
	}
}

func (c *Controller) reportOverflow(ns string, keys []string) {
	c.mu.Lock()
	c.overflow[ns] = len(keys)
	c.mu.Unlock()
	for _, key := range keys {
		for _, u := range c.revisions(ns) {
			if rev, _ := RevisionOf(string(u.Kind()), u.Name, u.UID, u.Owner); rev.Key == key {
				c.event(u, corev1.EventTypeWarning, ReasonTableFull, fmt.Sprintf("no room for this revision's entry in the namespace's PinTables "+
					"(each at most %d bytes; a workload's own table when split off is full too): its pods are refused until older revisions "+
					"go (revisionHistoryLimit)", c.opts.MaxTableBytes))
			}
		}
	}
}

func (c *Controller) event(u *caches.User, typ, reason, msg string) {
	if c.events == nil {
		return
	}
	c.events.Event(&corev1.ObjectReference{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: u.TypeMeta.Kind, Namespace: u.Namespace, Name: u.Name, UID: u.UID},
		typ, reason, msg)
}
