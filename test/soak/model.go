package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The soak's world: a fixed fleet of workloads of every kind spread over a few namespaces, each with
// its own config revision and, chosen by the seed, the namespace's shared ConfigMap and Secret.
// The model is what the soak applied; random choices are made from it alone (never from what the
// cluster shows), so a seed always replays the same sequence.

var namespaces = []string{"soak-a", "soak-b", "soak-c"}

// leaseNamespace holds the controllers' Lease; it is not watched.
const leaseNamespace = "soak-system"

// attachLabel tells the controller's -replicaset-selector which ReplicaSets the Job mode attaches
// instead: the pod template carries it, so every ReplicaSet of such a workload does.
const attachLabel = "soak.configmap-attacher.io/attach"

type kind string

const (
	canary      kind = "Rollout"
	workloadRef kind = "Rollout/workloadRef"
	deployment  kind = "Deployment"
	statefulSet kind = "StatefulSet"
	daemonSet   kind = "DaemonSet"
	cronJob     kind = "CronJob"
)

func (k kind) isRollout() bool { return k == canary || k == workloadRef }

// hasReplicaSets: Rollouts and Deployments, the kinds the Job mode and undo know.
func (k kind) hasReplicaSets() bool { return k.isRollout() || k == deployment }

type app struct {
	name, ns string
	kind     kind
	jobMode  bool // attached by running the Job mode after each deploy, not by the controller
	exists   bool
	// What its pod template references now ("" = not used) and runs.
	own, shared, secret string
	image               string
	historyLimit        *int32
	jobs                []string // CronJob: the Jobs created from it, oldest first
	// Zero-touch pinning: the workload reads its own pinned ConfigMap (and, by the seed, Secret) by
	// name, changed in place, with their content's checksum on its pod template (pinning.go).
	pinned    bool
	pinSecret bool
	checksum  string // the template's; undo may set an older revision's
	// Config-triggered (trigger.go): the workload carries Reloader's annotations (reload says which)
	// and its pinned objects are edited in place with no checksum on the template, unless pin-config
	// deployed one (config and template together); states are the contents its pinned objects held,
	// oldest first (what a revert goes back to).
	trigger      bool
	reload       string
	states       []contentState
	changesDrawn int // steps drawn that change its content (trig-revert needs one)
}

func (w *app) String() string { return w.ns + "/" + w.name }

func (w *app) describe() string {
	mode := "controller"
	if w.jobMode {
		mode = "job mode"
	}
	return fmt.Sprintf("%s/%s (%s, %s)", w.ns, w.name, w.kind, mode)
}

func (w *app) configMaps() []string {
	if w.pinned {
		return []string{w.pinName(false)}
	}
	out := []string{w.own}
	if w.shared != "" {
		out = append(out, w.shared)
	}
	return out
}

func (w *app) secrets() []string {
	if w.pinned && w.pinSecret {
		return []string{w.pinName(true)}
	}
	if w.secret == "" {
		return nil
	}
	return []string{w.secret}
}

// template is the workload's pod template: its ConfigMaps through a projected volume, its Secret
// through envFrom (framework.PodTemplate, as the e2e tests), its image, and who attaches it.
func (w *app) template() corev1.PodTemplateSpec {
	t := framework.PodTemplate(w.name, w.configMaps(), w.secrets())
	t.Spec.Containers[0].Image = w.image
	t.Labels[attachLabel] = "controller"
	if w.jobMode {
		t.Labels[attachLabel] = "job"
	}
	if w.kind == cronJob {
		t.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	if w.pinned && w.checksum != "" {
		t.Annotations = map[string]string{checksumAnnotation: w.checksum}
	}
	return t
}

// config is one revision the soak created: enough to create it again under the same name.
type config struct {
	secret bool
	base   string
	data   map[string]string
}

// namespaceState is the current revision of a namespace's shared ConfigMap and Secret.
type namespaceState struct {
	shared, secret string
}

// rng wraps the one random source. Every draw takes exactly one value from it, whatever the bound,
// so the sequence of draws depends on the program's path only, never on the values drawn.
type rng struct{ r *rand.Rand }

func (g rng) intn(n int) int {
	v := g.r.Uint64()
	if n <= 0 {
		return 0
	}
	return int(v % uint64(n))
}

func (g rng) chance(p float64) bool { return g.r.Float64() < p }

// index maps a pre-drawn value onto a list whose length only the cluster knows.
func index(v uint64, n int) int { return int(v % uint64(n)) }

type soak struct {
	c            *framework.Cluster
	localCluster bool // one the soak started: kube-apiserver can be restarted
	bin          framework.Binary
	o            options
	rnd          rng
	step         int

	fleet   []*app
	ns      map[string]*namespaceState
	configs map[string]config // by "ns/name"

	ctl  *controllers
	pin  *pinningState
	trig *triggerState

	// figures
	faults        map[string]int
	lost          int
	leaked        int
	unpinned      int
	wrong         int
	refused       int
	unattachedN   int
	retained      int
	seen          map[string]map[string]bool // by kind of violation, what was reported
	errors        int
	drawn         map[action]int // steps drawn, by action
	pinnedOps     int            // promote, abort, undo, history drawn for a pinned workload
	jobFailures   int
	crashes       int
	planeRestarts int
}

// newSoak prepares a run on c; a nil c only plans (plan).
func newSoak(c *framework.Cluster, bin framework.Binary, o options) *soak {
	s := &soak{c: c, bin: bin, o: o, localCluster: c == nil || c.Owned(),
		rnd:     rng{rand.New(rand.NewPCG(o.seed, 0x50a4))},
		ns:      map[string]*namespaceState{},
		configs: map[string]config{},
		faults:  map[string]int{},
		drawn:   map[action]int{},
		seen: map[string]map[string]bool{"lost": {}, "leaked": {}, "unattached": {}, "retained": {},
			"unpinned": {}, "wrong": {}, "refused": {}, "revisions": {}},
	}
	s.pin = newPinningState()
	s.trig = newTriggerState()
	s.ctl = newControllers(s)
	return s
}

// fleet: the kinds, and which are attached by the Job mode; namespaces and config sharing come from
// the seed.
// reload: the config-triggered workloads' Reloader annotation (trigger.go), "" for the others.
var fleetSpec = []struct {
	name    string
	kind    kind
	jobMode bool
	pinned  bool
	reload  string
}{
	{"canary-1", canary, false, false, ""},
	{"canary-2", canary, true, false, ""},
	{"ref-1", workloadRef, false, false, ""},
	{"ref-2", workloadRef, true, false, ""},
	{"web-1", deployment, false, false, ""},
	{"web-2", deployment, true, false, ""},
	{"db", statefulSet, false, false, ""},
	{"agent", daemonSet, false, false, ""},
	{"cron", cronJob, false, false, ""},
	{"pin-canary", canary, false, true, ""},
	{"pin-web", deployment, false, true, ""},
	{"trig-canary", canary, false, true, reloadAuto},
	{"trig-ref", workloadRef, false, true, reloadAuto},
	{"trig-web", deployment, false, true, reloadList},
	{"trig-db", statefulSet, false, true, reloadKinds},
	{"trig-agent", daemonSet, false, true, reloadAuto},
}

// setUp creates fresh namespaces, starts the controllers and creates the fleet.
func (s *soak) setUp(ctx context.Context) error {
	all := append([]string{leaseNamespace}, namespaces...)
	// A previous run's webhook registration would refuse pods of the new namespaces once labelled.
	if err := s.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhookConfiguration, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// A previous run's objects carry our finalizer; release them so the namespaces can go.
	if r := s.bin.Run(ctx, []string{"LOG_LEVEL=warn"}, "release", "-n", strings.Join(namespaces, ",")); r.Code != 0 &&
		!strings.Contains(r.Stderr+r.Stdout, "not found") {
		fmt.Fprintf(os.Stderr, "soak: releasing leftovers: %s\n", r)
	}
	for _, ns := range all {
		if err := s.c.DeleteNamespace(ctx, ns); err != nil {
			return err
		}
	}
	for _, ns := range all {
		if err := framework.Eventually(ctx, 3*time.Minute, "namespace "+ns+" gone", func(ctx context.Context) (bool, string, error) {
			_, err := s.c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), "terminating", nil
		}); err != nil {
			return err
		}
		if err := s.c.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	// Every revision created from now on is counted (trigger.go judges the config changes by it).
	watch, err := s.watchRevisions(ctx)
	if err != nil {
		return err
	}
	s.trig.watch = watch
	// Pinning on in every namespace before anything runs there (pin-toggle flips it later).
	for _, ns := range namespaces {
		if err := s.setPinning(ctx, ns, true); err != nil {
			return err
		}
	}
	if s.admissionPolicy() {
		if err := s.setUpPolicy(ctx); err != nil {
			return err
		}
	}
	if err := s.ctl.startAll(ctx); err != nil {
		return err
	}
	if err := s.ctl.waitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	if s.admissionPolicy() {
		if err := s.waitTables(ctx); err != nil {
			return err
		}
		s.watchEntries()
	}

	s.placeFleet()
	fmt.Println("fleet:")
	for _, w := range s.fleet {
		if err := s.create(ctx, w); err != nil {
			return fmt.Errorf("creating %s: %w", w.describe(), err)
		}
		fmt.Printf("  %-42s uses %s\n", w.describe(), strings.Join(append(w.configMaps(), w.secrets()...), ", "))
	}
	if v := s.checkStep(ctx); len(v) > 0 {
		s.report(v)
	}
	return nil
}

// placeFleet decides, from the seed alone, where each workload runs and what config it uses.
func (s *soak) placeFleet() {
	for _, ns := range namespaces {
		s.ns[ns] = &namespaceState{shared: s.revision(ns, "shared-cm", false), secret: s.revision(ns, "shared-secret", true)}
	}
	for _, f := range fleetSpec {
		w := &app{name: f.name, kind: f.kind, jobMode: f.jobMode, pinned: f.pinned, reload: f.reload, trigger: f.reload != "", image: "nginx:1.27"}
		w.ns = namespaces[s.rnd.intn(len(namespaces))]
		if f.pinned {
			w.pinSecret = s.rnd.chance(0.5)
			s.bumpPins(w)
			if !w.trigger {
				w.checksum = s.pinChecksum(w)
			}
			s.fleet = append(s.fleet, w)
			continue
		}
		if s.rnd.chance(0.5) {
			w.shared = s.ns[w.ns].shared
		}
		if s.rnd.chance(0.4) && !w.jobMode { // the original Job knew no Secrets
			w.secret = s.ns[w.ns].secret
		}
		w.own = s.revision(w.ns, w.name+"-cm", false)
		s.fleet = append(s.fleet, w)
	}
}

// revision names the next revision of base in ns by its content, as the chart does, and records it;
// ensureConfig creates it. The content holds the step, so every revision is new.
func (s *soak) revision(ns, base string, secret bool) string {
	data := map[string]string{"base": base, "step": fmt.Sprint(s.step), "seed": fmt.Sprint(s.o.seed)}
	name := framework.RevisionedName(base, data)
	s.configs[ns+"/"+name] = config{secret: secret, base: base, data: data}
	return name
}

// ensureConfig creates a revision the soak made before, if it is gone (a workload recreated with the
// same config, as a reinstall of the same chart values does). One that still exists, even being
// deleted, is used as it is.
func (s *soak) ensureConfig(ctx context.Context, ns, name string) error {
	cfg, ok := s.configs[ns+"/"+name]
	if !ok {
		return fmt.Errorf("no config %s/%s in the model", ns, name)
	}
	yes := true
	meta := metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue, "soak-base": cfg.base}}
	for attempt := 0; ; attempt++ {
		var err error
		if cfg.secret {
			_, err = s.c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta, StringData: cfg.data, Immutable: &yes}, metav1.CreateOptions{})
		} else {
			_, err = s.c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: cfg.data, Immutable: &yes}, metav1.CreateOptions{})
		}
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if attempt == 5 {
			return err
		}
		time.Sleep(time.Second) // the API server may be restarting
	}
}

func (s *soak) deleteConfig(ctx context.Context, ns, name string) error {
	var err error
	if s.configs[ns+"/"+name].secret {
		err = s.c.Kube.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
	} else {
		err = s.c.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// targets returns the workloads matching ok, in fleet order.
func (s *soak) targets(ok func(*app) bool) []*app {
	var out []*app
	for _, w := range s.fleet {
		if ok(w) {
			out = append(out, w)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
