package main

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The soak in admission policy mode (-pinning-admission=policy): the API server pins pods from the
// PinTables the controller keeps; no webhook, so no webhook-kill, cert-rotate, bundle-wipe nor
// webhook-policy steps, and ctl-kill stops every replica for 1-3 steps with nothing of ours on the pod
// path. The invariants are the same, judged more strictly: a pod read unpinned only where its namespace
// had pinning off (there is no failing open); and a pod creation may be refused only while its
// revision had no entry in the tables yet (the validating policy, which says so), never once the soak
// has seen the entry.

// admissionPolicy is the soak's -pinning-admission=policy.
func (s *soak) admissionPolicy() bool { return s.o.admission == string(policy.Policy) }

// waitedRefusals sums the pod creations refused while their revision's entry was missing.
func (p *pinningState) waitedRefusals() int {
	n := 0
	for _, c := range p.waited {
		n += int(c)
	}
	return n
}

// entries records when the soak first saw each revision's entry in a PinTable of its namespaces.
type entries struct {
	mu   sync.Mutex
	seen map[string]time.Time // "namespace/key"
	stop chan struct{}
}

// watchEntries starts recording the entries of the soak's namespaces' tables.
func (s *soak) watchEntries() {
	e := &entries{seen: map[string]time.Time{}, stop: make(chan struct{})}
	for _, ns := range namespaces {
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.c.Dynamic, 0, ns, nil)
		inf := f.ForResource(policy.GVR).Informer()
		record := func(obj any) {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return
			}
			t, err := policy.FromUnstructured(u)
			if err != nil {
				return
			}
			now := time.Now()
			e.mu.Lock()
			defer e.mu.Unlock()
			for key := range t.Spec.Revisions {
				if _, ok := e.seen[ns+"/"+key]; !ok {
					e.seen[ns+"/"+key] = now
				}
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, cur any) { record(cur) }})
		f.Start(e.stop)
	}
	s.pin.entries = e
}

// entrySeen is when the soak first saw the entry key of namespace ns.
func (e *entries) entrySeen(ns, key string) (time.Time, bool) {
	if e == nil {
		return time.Time{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.seen[ns+"/"+key]
	return t, ok
}

func (e *entries) close() {
	if e != nil {
		close(e.stop)
	}
}

// setUpPolicy makes the cluster ready for policy mode before the controller starts: the PinTable CRD,
// and no admission policy left by an earlier run.
func (s *soak) setUpPolicy(ctx context.Context) error {
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if err := s.c.EnsurePinTableCRD(ctx, root); err != nil {
		return err
	}
	return policy.DeletePolicies(ctx, s.c.Kube, webhookConfiguration)
}

// waitTables waits until every namespace has its PinTable and the policies are enforced: before that,
// the validating policy would refuse the fleet's first pods, or they would be admitted unpinned.
func (s *soak) waitTables(ctx context.Context) error {
	if err := s.waitTablesMade(ctx); err != nil {
		return err
	}
	for _, ns := range namespaces {
		if err := s.c.WaitPolicyEffective(ctx, ns); err != nil {
			return err
		}
	}
	return nil
}

func (s *soak) waitTablesMade(ctx context.Context) error {
	return framework.Eventually(ctx, time.Minute, "the admission policies and every namespace's PinTable", func(ctx context.Context) (bool, string, error) {
		if _, err := s.c.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, webhookConfiguration, metav1.GetOptions{}); err != nil {
			return false, "no binding yet", nil
		}
		for _, ns := range namespaces {
			if _, err := s.c.PinTable(ctx, ns); err != nil {
				return false, "no PinTable in " + ns, nil
			}
		}
		return true, "", nil
	})
}

// entryRe finds the revision key the validating policy's refusal names.
var entryRe = regexp.MustCompile(`has no entry (\S+) yet|\(entry (\S+)\): the API server had not loaded`)

// isPinningRefusal reports whether a FailedCreate Event's message is pinning's (the webhook's, or in
// policy mode the admission policies').
func isPinningRefusal(message string) bool {
	return strings.Contains(message, pinningWebhookName) || strings.Contains(message, "configmap-attacher pinning:") ||
		strings.Contains(message, "ValidatingAdmissionPolicy '"+webhookConfiguration+"'") ||
		strings.Contains(message, "MutatingAdmissionPolicy '"+webhookConfiguration+"'")
}

// policyRefusal judges a refusal in policy mode: one of a revision whose entry the soak had seen
// (margin before the refusal's last time) is a violation, unless its namespace's tables were missing
// then (crd-delete, table-delete: the gate refuses the pods of the revisions they held until the
// controller puts them back); and so is any other refusal of ours.
func (s *soak) policyRefusal(e refusal) (string, bool) {
	m := entryRe.FindStringSubmatch(e.message)
	if m == nil {
		return "by the admission policies, not for a missing entry", true
	}
	_, ns, _ := splitKey(e.object)
	key := m[1] + m[2]
	seen, ok := s.pin.entries.entrySeen(ns, key)
	if gone := s.pin.tablesAway[ns]; ok && e.last.After(seen.Add(settleMargin)) && (gone == nil || !gone.covers(e.last)) {
		return fmt.Sprintf("after its revision's entry was in the PinTable (seen %s)", seen.Format(time.TimeOnly)), true
	}
	uid, _, _ := strings.Cut(e.id, "/")
	s.pin.waited[uid] = max(e.count, 1)
	return "", false
}

// outageDeploy kills every replica once the workload's current revision is pinned, then deploys a
// change of its pinned objects: the new revision's pods are refused until the controller is back (at
// step upAt), then pinned to the new content; the old revision keeps its pods.
func (s *soak) outageDeploy(ctx context.Context, w *app, upAt int) (string, error) {
	if _, err := s.waitPinned(ctx, w, time.Minute); err != nil {
		return "", fmt.Errorf("nothing done: %w", err)
	}
	s.pin.disrupted.open(time.Now())
	s.ctl.killAll(upAt)
	out, err := s.pinConfig(ctx, w)
	if err != nil {
		return "", fmt.Errorf("both replicas killed (-9), back at step %d; the deploy: %w", upAt, err)
	}
	return fmt.Sprintf("both replicas killed (-9), then %s; back at step %d", out, upAt), nil
}

// crdDelete deletes the PinTable CRD, and with it every table of the cluster, and applies it again at
// once (what the docs once told users who wanted the tables gone), then waits until the controller has
// put every namespace's entries back. Meanwhile the gate refuses the pods of revisions that read
// config (their entries are gone), and admits none unpinned.
func (s *soak) crdDelete(ctx context.Context) (string, error) {
	before := map[string]map[string]bool{}
	for _, ns := range namespaces {
		keys, err := s.entryKeys(ctx, ns, "")
		if err != nil {
			return "", err
		}
		before[ns] = keys
	}
	start := time.Now()
	for _, ns := range namespaces {
		s.pin.tablesAway[ns].open(start)
	}
	if err := s.c.DeletePinTableCRD(ctx); err != nil {
		return "", err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	if err := s.c.EnsurePinTableCRD(ctx, root); err != nil {
		return "", err
	}
	applied := time.Since(start)
	for _, ns := range namespaces {
		if err := s.waitEntries(ctx, ns, "", before[ns]); err != nil {
			return "", err
		}
		s.pin.tablesAway[ns].close(time.Now())
	}
	return fmt.Sprintf("PinTable CRD deleted and applied again in %s; every namespace's entries put back after %s",
		applied.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond)), nil
}

// tableDelete deletes one of the namespace's PinTables (kubectl delete pintable), the pick-th by
// name, and waits until the controller has put it back with its entries.
func (s *soak) tableDelete(ctx context.Context, ns string, pick uint64) (string, error) {
	tables, err := s.c.PinTables(ctx, ns)
	if err != nil {
		return "", err
	}
	if len(tables) == 0 {
		return "no PinTable: nothing deleted", nil
	}
	names := slices.Sorted(maps.Keys(tables))
	name := names[index(pick, len(names))]
	before, err := s.entryKeys(ctx, ns, name)
	if err != nil {
		return "", err
	}
	start := time.Now()
	s.pin.tablesAway[ns].open(start)
	err = s.c.Dynamic.Resource(policy.GVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	if err := s.waitEntries(ctx, ns, "", before); err != nil {
		return "", err
	}
	s.pin.tablesAway[ns].close(time.Now())
	return fmt.Sprintf("PinTable %s/%s (%d of %d tables, %d entries) deleted; its entries back after %s", ns, name, index(pick, len(names))+1, len(names),
		len(before), time.Since(start).Round(10*time.Millisecond)), nil
}

// entryKeys are the entry keys of the namespace's PinTables (of table name alone, unless empty).
func (s *soak) entryKeys(ctx context.Context, ns, name string) (map[string]bool, error) {
	tables, err := s.c.PinTables(ctx, ns)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for n, t := range tables {
		if name != "" && n != name {
			continue
		}
		for key := range t.Spec.Revisions {
			out[key] = true
		}
	}
	return out, nil
}

// waitEntries waits until the namespace's PinTables (table name, unless empty) hold every entry of
// want whose revision still exists.
func (s *soak) waitEntries(ctx context.Context, ns, name string, want map[string]bool) error {
	return framework.Eventually(ctx, 2*time.Minute, "the PinTable entries of "+ns+" put back", func(ctx context.Context) (bool, string, error) {
		got, err := s.entryKeys(ctx, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		var missing []string
		for key := range want {
			if !got[key] {
				missing = append(missing, key)
			}
		}
		if len(missing) == 0 {
			return true, "", nil
		}
		live, err := s.liveRevisionKeys(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		missing = slices.DeleteFunc(missing, func(k string) bool { return !live[k] })
		return len(missing) == 0, fmt.Sprintf("%d entries missing, e.g. %v", len(missing), missing[:min(3, len(missing))]), nil
	})
}

// liveRevisionKeys are the table keys of the namespace's live revisions: each ReplicaSet's uid, and
// each StatefulSet's or DaemonSet's ControllerRevision as uid/hash (policy.RevisionOf).
func (s *soak) liveRevisionKeys(ctx context.Context, ns string) (map[string]bool, error) {
	out := map[string]bool{}
	rss, err := s.c.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, rs := range rss.Items {
		out[string(rs.UID)] = true
	}
	crs, err := s.c.Kube.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, cr := range crs.Items {
		if rev, ok := policy.RevisionOf("ControllerRevision", cr.Name, cr.UID, metav1.GetControllerOf(&cr)); ok {
			out[rev.Key] = true
		}
	}
	return out, nil
}

// policiesBack waits, after kube-apiserver restarted, until its admission policies read every
// namespace's tables again (the mutating policy marks a pod: WaitPolicyEffective), and closes the
// window. Until then (its PinTable informer not synced, the kind not resolved yet: seconds to tens of
// seconds on a loaded machine) the policies that read the tables fail open and the gate refuses the
// pods of revisions that read config, whether their entries are written or not; none is admitted
// unpinned.
func (s *soak) policiesBack(ctx context.Context) {
	for _, ns := range namespaces {
		if err := s.c.WaitPolicyEffective(ctx, ns); err != nil {
			fmt.Printf("      note: the admission policies not effective again in %s: %v\n", ns, err)
		}
		s.pin.tablesAway[ns].close(time.Now())
	}
}
