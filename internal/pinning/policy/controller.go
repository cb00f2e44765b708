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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
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
	// ReasonEntryWaiting, on the workload: a revision that wants pods has had no entry for longer than
	// Options.WaitWarning; its pods are refused meanwhile.
	ReasonEntryWaiting = "PinEntryWaiting"
)

// DefaultWaitWarning is Options.WaitWarning's default.
const DefaultWaitWarning = 2 * time.Minute

// flushEvery: a pass over a namespace's revisions (a read of each new revision's objects) writes the
// entries it has made so far at least this often, so that a namespace just labelled, or our return
// after an outage, does not keep every revision waiting for the slowest.
const flushEvery = time.Second

// namespacesAtOnce is how many namespaces each worker asked for (-workers) syncs at once.
const namespacesAtOnce = 4

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
	// WaitWarning: a revision that wants pods and has had no entry for longer gets a Warning Event on
	// its workload and counts in configmap_attacher_pin_revisions_waiting (DefaultWaitWarning when 0).
	WaitWarning time.Duration
	// Clock tells a revision's age when its entry is written, which decides a wake-up (the real clock
	// when nil; tests hold it still, so that a loaded machine cannot age a revision made a moment ago).
	Clock clock.PassiveClock
}

// Clients the table controller uses.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
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

	mu sync.Mutex
	// written are the tables as this controller last wrote them, by namespace and name: the only
	// writer's view, newer than the cache until the cache catches up.
	written map[string]map[string]written
	// deleted are the tables the cache saw deleted, by namespace and name: their uid.
	deleted map[string]map[string]types.UID
	// known is, by namespace, what this controller last wrote into the tables: what it puts back when
	// anyone else deletes or edits them.
	known map[string]knowledge
	// waits are the revisions without an entry, by namespace and key.
	waits map[string]map[string]*waiting
	// clears are the wake-up annotations to take off, by namespace.
	clears map[string][]clear

	writes   *prometheus.CounterVec
	restores *prometheus.CounterVec
	wakes    *prometheus.CounterVec
	overflow map[string]int // by namespace, the revisions refused an entry for size
}

// knowledge is what the controller last wrote into a namespace's tables: every entry with its route,
// and the shard of each workload split off.
type knowledge struct {
	entries map[string]Entry
	routes  map[string]string
	split   map[string]string
}

// clear is a wake-up annotation to take off at a time.
type clear struct {
	target wakeTarget
	at     time.Time
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
	if o.WaitWarning <= 0 {
		o.WaitWarning = DefaultWaitWarning
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	ctl := &Controller{caches: c, clients: clients, taker: taker, events: events, opts: o,
		written: map[string]map[string]written{}, deleted: map[string]map[string]types.UID{}, known: map[string]knowledge{},
		waits: map[string]map[string]*waiting{}, clears: map[string][]clear{}, overflow: map[string]int{}}
	// A sync is a namespace's reads and writes one after the other, each waiting on the API server (at
	// 50,000 Pods, ~100 ms): a fresh start or a cluster labelled at once is a thousand namespaces, so
	// several are synced at once.
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: ctl.sync, Metrics: m, WorkersPer: namespacesAtOnce}

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
	if err := ctl.tables.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: byNamespace, UpdateFunc: func(_, cur any) { byNamespace(cur) },
		DeleteFunc: ctl.tableDeleted}); err != nil {
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
		ctl.restores = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "configmap_attacher_pin_table_restores_total",
			Help: "PinTables put back after someone else deleted or changed them, by what was done to them (deleted, edited)."}, []string{"cause"})
		for _, cause := range []string{"deleted", "edited"} {
			ctl.restores.WithLabelValues(cause)
		}
		m.Registry.MustRegister(ctl.restores)
		ctl.wakes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "configmap_attacher_pin_wakes_total",
			Help: "Workload controllers woken (an annotation of ours on the revision's ReplicaSet or ControllerRevision, or a StatefulSet) once a revision whose pods were refused got its entry, by kind of workload."},
			[]string{"kind"})
		for _, kind := range []string{"ReplicaSet", "StatefulSet", "DaemonSet"} {
			ctl.wakes.WithLabelValues(kind)
		}
		m.Registry.MustRegister(ctl.wakes)
		m.Gauge("configmap_attacher_pin_revisions_waiting", "Revisions that want pods and have had no PinTable entry for longer than -pinning-wait-warning: their pods are refused.",
			func() float64 { return float64(ctl.waitingLong(time.Now())) })
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

// tableDeleted remembers a table the cache saw deleted (so that what this controller wrote there is
// not taken for still there), and queues its namespace.
func (c *Controller) tableDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, ok := obj.(metav1.Object); ok {
		c.mu.Lock()
		ns, name := m.GetNamespace(), m.GetName()
		if w, ok := c.written[ns][name]; !ok || w.table != nil || w.deleted != m.GetUID() { // not our own deletion
			if c.deleted[ns] == nil {
				c.deleted[ns] = map[string]types.UID{}
			}
			c.deleted[ns][name] = m.GetUID()
		}
		c.mu.Unlock()
	}
	c.enqueue(obj)
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
	var res reconcile.Result
	var errs []error
	after := func(d time.Duration) {
		if d > 0 && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
			res.RequeueAfter = d
		}
	}
	after(c.clearWakes(ctx, ns, time.Now()))
	if !c.inScope(ns) || !c.caches.Pinning.Enabled(ns) {
		// Pinning off (or never on): the policies do not look here. A table stays as it is, so that
		// turning pinning on again finds every revision that kept its entry answered at once (a table
		// made anew would leave the namespace's pods refused until it is).
		return res, nil
	}
	live, existing, trusted, err := c.current(ns)
	if err != nil {
		return res, err
	}
	if len(live) == 0 && len(existing.entries) == 0 {
		// A namespace just labelled: its (empty) table first, before the reads of its revisions.
		if err := c.apply(ctx, ns, plan(ns, live, Desired{}, c.opts.MaxTableBytes)); err != nil {
			return res, err
		}
		if live, _, _, err = c.current(ns); err != nil {
			return res, err
		}
	}
	d := Desired{Entries: map[string]Entry{}, Routes: map[string]string{}, Split: existing.split}
	revisions := c.revisions(ns)
	// One pass of reads for them all, made after they were seen (pinning.Pass).
	pass := c.taker.Pass(ns)
	byKey := map[string]*caches.User{}
	for _, u := range revisions {
		rev, _ := RevisionOf(string(u.Kind()), u.Name, u.UID, u.Owner)
		byKey[rev.Key] = u
	}
	// flush writes what this pass has made so far, the other entries as they are.
	lastFlush, fresh := time.Now(), 0
	flush := func() {
		partial := Desired{Entries: maps.Clone(d.Entries), Routes: maps.Clone(d.Routes), Split: d.Split}
		for key, e := range existing.entries {
			if _, ok := partial.Entries[key]; !ok {
				partial.Entries[key], partial.Routes[key] = e, existing.routes[key]
			}
		}
		if err := c.write(ctx, ns, live, partial, byKey); err != nil {
			errs = append(errs, err)
			return
		}
		live, _, _, _ = c.current(ns)
	}
	for _, u := range revisions {
		if fresh > 0 && time.Since(lastFlush) >= flushEvery {
			flush()
			lastFlush, fresh = time.Now(), 0
		}
		rev, _ := RevisionOf(string(u.Kind()), u.Name, u.UID, u.Owner)
		e, had := existing.entries[rev.Key]
		now := time.Now()
		w := c.waitOf(ns, rev.Key)
		if !had && !w.due(now, u.Generation) {
			after(w.next.Sub(now))
			continue
		}
		var taken []string
		var wait string
		var pods bool
		var err error
		if had {
			e, taken, err = c.refresh(ctx, pass, u, e, trusted)
		} else {
			e, taken, wait, pods, err = c.newEntry(ctx, pass, u, rev)
		}
		switch {
		case errors.Is(err, errNotYet):
			after(waitRetry)
			continue
		case err != nil:
			errs = append(errs, err)
			if had {
				d.Entries[rev.Key], d.Routes[rev.Key] = existing.entries[rev.Key], rev.Route // keep what it had
			}
			continue
		case wait != "":
			w = c.stillWaiting(ns, rev.Key, now, u.Generation, pods, wait)
			c.event(u, corev1.EventTypeNormal, ReasonWaiting, "pods of this revision wait for "+wait+
				" to exist before configmap-attacher records what they read (they could not start without it)")
			after(w.next.Sub(now))
			continue
		}
		if len(taken) > 0 {
			logging.FromContext(ctx).Info("pinned", "revision", rev.Kind+"/"+rev.Name, "snapshots", taken)
			c.event(u, corev1.EventTypeNormal, pinning.ReasonPinned, "pods of this revision read "+strings.Join(taken, ", "))
		}
		d.Entries[rev.Key], d.Routes[rev.Key] = e, rev.Route
		if !had {
			fresh++
		}
	}
	// Entries of revisions the cache no longer shows: removed once the API server agrees they are gone.
	for key, e := range existing.entries {
		if _, ok := d.Entries[key]; ok {
			continue
		}
		gone, route, err := c.gone(ctx, ns, key, e)
		if err != nil {
			errs = append(errs, err)
		}
		if !gone || err != nil {
			d.Entries[key], d.Routes[key] = e, route
			after(waitRetry)
		}
	}
	if err := c.write(ctx, ns, live, d, byKey); err != nil {
		errs = append(errs, err)
	}
	after(c.warnWaiting(ns, byKey, time.Now()))
	return res, errors.Join(errs...)
}

// write plans the tables for d and applies the plan; then, for the revisions whose entries it made
// present, it wakes their controllers where their pods were refused, and forgets they waited.
func (c *Controller) write(ctx context.Context, ns string, live map[string]*Table, d Desired, byKey map[string]*caches.User) error {
	p := plan(ns, live, d, c.opts.MaxTableBytes)
	c.reportOverflow(ns, p.Overflow)
	if err := c.apply(ctx, ns, p); err != nil {
		return err
	}
	written := maps.Clone(d.Entries)
	for _, key := range p.Overflow {
		delete(written, key)
	}
	var split map[string]string
	for _, w := range p.Writes {
		if w.Table.Name == TableName && w.Op != "delete" {
			split = w.Table.Spec.Split
		}
	}
	if split == nil && live[TableName] != nil {
		split = live[TableName].Spec.Split
	}
	routes := map[string]string{}
	for key := range written {
		routes[key] = d.Routes[key]
	}
	c.mu.Lock()
	c.known[ns] = knowledge{entries: written, routes: routes, split: split}
	c.mu.Unlock()

	now := c.opts.Clock.Now()
	woken := map[wakeTarget]bool{}
	var errs []error
	for key := range written {
		u, ok := byKey[key]
		if !ok {
			continue
		}
		c.entryWritten(ns, key)
		if held(live, key) {
			continue
		}
		t, ok := targetOf(u)
		if !ok || woken[t] || u.CreationTimestamp.IsZero() {
			continue
		}
		f := wakeFacts{enforced: c.opts.Take, age: now.Sub(u.CreationTimestamp.Time)}
		if f.enforced && f.age >= wakeAge { // read only for those the other facts do not settle
			missing, err := c.podsMissing(ctx, t)
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
				continue
			}
			f.podsMissing = missing
		}
		if !shouldWake(f) {
			continue
		}
		woken[t] = true
		at := now.UTC().Format(time.RFC3339Nano)
		if err := c.annotate(ctx, t, &at); err != nil {
			errs = append(errs, err)
			continue
		}
		logging.FromContext(ctx).Info("woke the controller of a revision whose pods were refused until its entry", "object", t.String(), "revision", u.Name,
			"waited", f.age.Round(time.Millisecond))
		if c.wakes != nil {
			c.wakes.WithLabelValues(t.Workload).Inc()
		}
		c.mu.Lock()
		c.clears[ns] = append(c.clears[ns], clear{target: t, at: now.Add(wakeClear)})
		c.mu.Unlock()
		c.loop.Queue.AddAfter(ns, wakeClear)
	}
	return errors.Join(errs...)
}

// held reports whether some table holds the entry key.
func held(tables map[string]*Table, key string) bool {
	for _, t := range tables {
		if _, ok := t.Spec.Revisions[key]; ok {
			return true
		}
	}
	return false
}

// clearWakes takes off the wake-up annotations that are due, and returns how soon the next one is.
func (c *Controller) clearWakes(ctx context.Context, ns string, now time.Time) time.Duration {
	c.mu.Lock()
	var due, later []clear
	for _, cl := range c.clears[ns] {
		if now.Before(cl.at) {
			later = append(later, cl)
		} else {
			due = append(due, cl)
		}
	}
	c.clears[ns] = later
	c.mu.Unlock()
	for _, cl := range due {
		if err := c.annotate(ctx, cl.target, nil); err != nil {
			logging.FromContext(ctx).Warn("taking off the wake-up annotation", "object", cl.target.String(), "err", err)
			c.mu.Lock()
			c.clears[ns] = append(c.clears[ns], clear{target: cl.target, at: now.Add(wakeClear)})
			c.mu.Unlock()
		}
	}
	var next time.Duration
	c.mu.Lock()
	for _, cl := range c.clears[ns] {
		if d := cl.at.Sub(now); next == 0 || d < next {
			next = max(d, time.Millisecond)
		}
	}
	c.mu.Unlock()
	return next
}

// waitOf is the waiting state of revision key of ns, nil when it is not waiting.
func (c *Controller) waitOf(ns, key string) *waiting {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waits[ns][key]
}

// stillWaiting records a look at a revision that found it still waiting for what.
func (c *Controller) stillWaiting(ns, key string, now time.Time, generation int64, pods bool, what string) *waiting {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waits[ns] == nil {
		c.waits[ns] = map[string]*waiting{}
	}
	w := c.waits[ns][key]
	if w == nil {
		w = &waiting{since: now}
		c.waits[ns][key] = w
	}
	w.what = what
	w.retry(now, generation, pods)
	return w
}

// entryWritten forgets that a revision waited.
func (c *Controller) entryWritten(ns, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waits[ns], key)
}

// warnWaiting records a Warning Event on the workload of each revision of ns that wants pods and has
// waited for its entry longer than Options.WaitWarning, once; it forgets revisions gone, and returns
// how soon the next warning is due.
func (c *Controller) warnWaiting(ns string, byKey map[string]*caches.User, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Duration
	for key, w := range c.waits[ns] {
		u, ok := byKey[key]
		switch {
		case !ok:
			delete(c.waits[ns], key)
			continue
		case !w.pods || w.warned:
			continue
		}
		if d := w.since.Add(c.opts.WaitWarning).Sub(now); d > 0 {
			if next == 0 || d < next {
				next = d
			}
			continue
		}
		w.warned = true
		msg := fmt.Sprintf("pods of %s %s are refused: configmap-attacher has had no PinTable entry for it since %s (%s); it waits for %s",
			u.Kind(), u.Name, w.since.UTC().Format(time.RFC3339), now.Sub(w.since).Round(time.Second), w.what)
		if u.Owner != nil {
			c.recordOn(&corev1.ObjectReference{APIVersion: u.Owner.APIVersion, Kind: u.Owner.Kind, Namespace: u.Namespace, Name: u.Owner.Name, UID: u.Owner.UID},
				corev1.EventTypeWarning, ReasonEntryWaiting, msg)
		} else {
			c.event(u, corev1.EventTypeWarning, ReasonEntryWaiting, msg)
		}
	}
	return next
}

// waitingLong counts the revisions that want pods and have waited for their entry longer than
// Options.WaitWarning.
func (c *Controller) waitingLong(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ws := range c.waits {
		for _, w := range ws {
			if w.pods && now.Sub(w.since) > c.opts.WaitWarning {
				n++
			}
		}
	}
	return n
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

// newEntry is the first entry of a revision, from a consistent read of every object it references
// (the pass's, made after the revision was seen): a pin label put on in the same deploy as the
// revision is seen, whatever the cache shows yet. It
// waits (wait names what) while an object the revision cannot start without does not exist: created a
// moment later, labelled, its pods would otherwise have read it unpinned.
func (c *Controller) newEntry(ctx context.Context, pass *pinning.Pass, u *caches.User, rev Revision) (e Entry, taken []string, wait string, pods bool, err error) {
	e = Entry{Revision: rev.Kind + "/" + rev.Name}
	var missing []refs.Ref
	for _, r := range u.Refs {
		if snap, ok := c.caches.Pinning.Snapshot(u.Namespace, string(u.UID), r); ok {
			e.Pin(r, snap) // pinned before (the webhook, a previous leader): nothing to read
			continue
		}
		m, err := pass.Get(ctx, r)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, r)
			continue
		case err != nil:
			return e, nil, "", false, fmt.Errorf("reading %s %s/%s for %s: %w", r.Kind, u.Namespace, r.Name, e.Revision, err)
		}
		if !pinnable(m.GetLabels()) {
			continue
		}
		snap, err := c.pin(ctx, pass, u, r)
		switch {
		case errors.Is(err, pinning.ErrNotPinned) || errors.Is(err, pinning.ErrNotPinnable):
			continue // the label went away meanwhile; or a token Secret, read by its name as in webhook mode
		case apierrors.IsNotFound(err):
			missing = append(missing, r)
			continue
		case err != nil:
			return e, nil, "", false, err
		case snap == "":
			return e, nil, "", false, errNotYet // webhook mode: the taker's snapshot is on its way to the cache
		}
		e.Pin(r, snap)
		taken = append(taken, fmt.Sprintf("%s/%s -> %s", strings.ToLower(string(r.Kind)), r.Name, snap))
	}
	if len(missing) > 0 {
		needed, pods, err := c.needed(ctx, u, missing)
		if err != nil {
			return e, nil, "", false, err
		}
		if len(needed) > 0 {
			return e, nil, strings.Join(needed, ", "), pods, nil
		}
	}
	return e, taken, "", false, nil
}

// refresh brings an entry up to date with the cache: an object labelled since gets its snapshot, and
// a revision's pin that changed (a hand-deleted snapshot held for it, replaced) is followed. A mapping
// this controller wrote (trusted) is never removed: the cache not showing a snapshot yet is no reason
// to unpin. One it did not write (the tables as it found them at its start) stays only if it names a
// snapshot of the object it maps: a PinTable written by anyone else cannot point a revision's pods at
// another object.
func (c *Controller) refresh(ctx context.Context, pass *pinning.Pass, u *caches.User, e Entry, trusted bool) (Entry, []string, error) {
	out := Entry{Revision: e.Revision, ConfigMaps: maps.Clone(e.ConfigMaps), Secrets: maps.Clone(e.Secrets)}
	if !trusted {
		for _, kind := range refs.Kinds() {
			m := out.ConfigMaps
			if kind == refs.Secret {
				m = out.Secrets
			}
			for name, snap := range m {
				if !content.IsRevisionOf(snap, name) || !slices.Contains(c.caches.Pinning.SnapshotsOf(u.Namespace, refs.Ref{Kind: kind, Name: name}), snap) {
					delete(m, name)
				}
			}
		}
	}
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
		snap, err := c.pin(ctx, pass, u, r)
		switch {
		case errors.Is(err, pinning.ErrNotPinned) || errors.Is(err, pinning.ErrNotPinnable) || apierrors.IsNotFound(err) || (err == nil && snap == ""):
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
func (c *Controller) pin(ctx context.Context, pass *pinning.Pass, u *caches.User, r refs.Ref) (string, error) {
	if !c.opts.Take {
		snap, _ := c.caches.Pinning.Snapshot(u.Namespace, string(u.UID), r)
		return snap, nil
	}
	return pass.Take(ctx, u.Revision(), r)
}

// needed are those of the missing objects the revision's pods cannot start without (a use that is not
// optional, in volumes or env), read from the revision itself; and whether the revision wants pods (a
// ReplicaSet's spec.replicas; a ControllerRevision is taken to).
func (c *Controller) needed(ctx context.Context, u *caches.User, missing []refs.Ref) ([]string, bool, error) {
	var spec *corev1.PodSpec
	pods := true
	switch u.Kind() {
	case caches.ReplicaSet:
		rs, err := c.clients.Kube.AppsV1().ReplicaSets(u.Namespace).Get(ctx, u.Name, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		spec = &rs.Spec.Template.Spec
		pods = rs.Spec.Replicas == nil || *rs.Spec.Replicas > 0
	case caches.ControllerRevision:
		cr, err := c.clients.Kube.AppsV1().ControllerRevisions(u.Namespace).Get(ctx, u.Name, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		t, err := caches.ControllerRevisionTemplate(cr)
		if err != nil {
			return nil, false, err
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
	return out, pods, nil
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

// current are the namespace's tables as the API server has them, as far as this controller can tell:
// the cache's, or what this controller last wrote where the cache has not caught up with it (a table
// the cache saw deleted since is gone). And what the tables should hold: what this controller last
// wrote there (trusted), or, before its first write, what the tables hold. A table anyone else
// deleted or changed is thus written again as this controller knows it (Controller.apply counts it).
func (c *Controller) current(ns string) (map[string]*Table, knowledge, bool, error) {
	out := map[string]*Table{}
	objs, err := c.tables.InNamespace(ns, func(*unstructured.Unstructured) bool { return true })
	if err != nil {
		return nil, knowledge{}, false, err
	}
	for _, u := range objs {
		t, err := FromUnstructured(u)
		if err != nil {
			return nil, knowledge{}, false, err
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
		case w.table != nil && !ok && c.sawDeleted(ns, name, w.table.UID):
			delete(c.written[ns], name) // deleted by someone else: the cache saw it go
		case w.table != nil && (!ok || newer(w.table.ResourceVersion, cached.ResourceVersion)):
			out[name] = w.table
		}
	}
	if k, ok := c.known[ns]; ok {
		return out, k, true, nil
	}
	k := knowledge{entries: map[string]Entry{}, routes: map[string]string{}}
	if main, ok := out[TableName]; ok {
		k.split = main.Spec.Split
	}
	for _, t := range out {
		maps.Copy(k.entries, t.Spec.Revisions)
	}
	return out, k, false, nil
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

// apply writes the plan in its order, remembering what it wrote. A write of a table this controller
// wrote before, which someone else has since deleted or changed, is counted as a restore.
func (c *Controller) apply(ctx context.Context, ns string, p Plan) error {
	res := c.clients.Dynamic.Resource(GVR).Namespace(ns)
	for _, w := range p.Writes {
		cause := c.restoring(ns, w)
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
				if apierrors.IsAlreadyExists(err) {
					// There, but not in the cache: our label taken off it. Written over, as ours.
					var live *unstructured.Unstructured
					if live, err = res.Get(ctx, w.Table.Name, metav1.GetOptions{}); err == nil {
						obj.SetResourceVersion(live.GetResourceVersion())
						out, err = res.Update(ctx, obj, metav1.UpdateOptions{FieldManager: api.FieldManager})
						cause = "edited"
					}
				}
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
		if cause != "" && w.Op != "delete" {
			logging.FromContext(ctx).Info("put back a PinTable someone else had "+cause, "table", w.Table.Name, "entries", len(w.Table.Spec.Revisions))
			if c.restores != nil {
				c.restores.WithLabelValues(cause).Inc()
			}
		}
	}
	return nil
}

// sawDeleted reports whether the cache saw table name of ns deleted (with that uid, unless empty).
// Under c.mu.
func (c *Controller) sawDeleted(ns, name string, uid types.UID) bool {
	got, ok := c.deleted[ns][name]
	return ok && (uid == "" || got == uid)
}

// restoring says whether write w puts back a table someone else deleted ("deleted") or changed
// ("edited") since this controller wrote it; "" otherwise.
func (c *Controller) restoring(ns string, w Write) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, known := c.known[ns]; !known {
		return ""
	}
	switch {
	case w.Op == "create" && c.sawDeleted(ns, w.Table.Name, ""):
		delete(c.deleted[ns], w.Table.Name)
		return "deleted"
	case w.Op == "update":
		if mine, ok := c.written[ns][w.Table.Name]; ok && mine.table != nil && mine.table.ResourceVersion != w.Table.ResourceVersion {
			return "edited"
		}
	}
	return ""
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
	c.recordOn(&corev1.ObjectReference{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: u.TypeMeta.Kind, Namespace: u.Namespace, Name: u.Name, UID: u.UID},
		typ, reason, msg)
}

func (c *Controller) recordOn(ref *corev1.ObjectReference, typ, reason, msg string) {
	if c.events != nil {
		c.events.Event(ref, typ, reason, msg)
	}
}
