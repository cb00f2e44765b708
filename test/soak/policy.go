package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

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
// (margin before the refusal's last time) is a violation, and so is any other refusal of ours.
func (s *soak) policyRefusal(e refusal) (string, bool) {
	m := entryRe.FindStringSubmatch(e.message)
	if m == nil {
		return "by the admission policies, not for a missing entry", true
	}
	_, ns, _ := splitKey(e.object)
	key := m[1] + m[2]
	seen, ok := s.pin.entries.entrySeen(ns, key)
	if ok && e.last.After(seen.Add(settleMargin)) {
		return fmt.Sprintf("after its revision's entry was in the PinTable (seen %s)", seen.Format(time.TimeOnly)), true
	}
	uid, _, _ := strings.Cut(e.id, "/")
	s.pin.waited[uid] = max(e.count, 1)
	return "", false
}
