package trigger

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
)

// Forced orders for an object that is not pinned: an edit lands after a revision was made (by our own
// write, by a deploy of the template alone, by a rollback) and before the controller's first look at
// that revision. The revision was made without the edit, so the edit starts one. (All four fail on
// main at d60a9aa, its fixture delivering the revisions' watch events: 0 writes, the edit taken for
// what the revision was made with.)
func TestAnEditBeforeTheFirstLookAtAnUnpinnedRevisionStartsOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(f *fixture) // makes the newest revision, unseen by the controller's sync
	}{
		{"our own write, the edit right after it", func(f *fixture) {
			f.edit("app-config", "v2")
			f.tick(6 * time.Second)
			f.sync()
			f.expectApplies(1)
			f.tick(time.Second)
			f.edit("app-config", "v3") // a follow-up fix, before the new revision is looked at
			f.tick(time.Second)
			f.observe()
		}},
		{"our own write, the edit before its revision appears", func(f *fixture) {
			f.edit("app-config", "v2")
			f.tick(6 * time.Second)
			f.sync()
			f.expectApplies(1)
			f.edit("app-config", "v3") // before the Deployment controller makes the revision
			f.tick(time.Second)
			f.observe()
		}},
		{"a deploy of the template alone", func(f *fixture) {
			f.deployment.Spec.Template.Annotations = map[string]string{"deploy": "2"}
			f.deployment.Generation++
			f.observe()
			f.tick(time.Second)
			f.edit("app-config", "v3") // after its revision appeared, before the first look at it
		}},
		{"a rollback to the revision before", func(f *fixture) {
			f.change("v2")
			f.tick(time.Minute)
			f.manager = "kubectl-rollout"
			f.deployment.Spec.Template.Annotations = maps.Clone(f.revisions[0].Spec.Template.Annotations)
			f.deployment.Generation++
			f.observe()
			f.tick(time.Second)
			f.edit("app-config", "v3") // the fix-forward edit, before the first look at the rollback
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, auto, configMap("app-config", "v1", nil))
			f.observe()
			f.sync()
			tc.before(f)
			writes := len(f.applied)
			f.sync() // the first look at the newest revision
			f.tick(6 * time.Second)
			f.sync()
			if len(f.applied) != writes+1 {
				t.Fatalf("%d writes after the edit, want 1: the edit was swallowed (taken for what the newest revision was made with)", len(f.applied)-writes)
			}
			// printf '%s' '{"data":{"config":"v3"}}' | sha256sum → a572974d76;
			// printf '%s' '{"ConfigMap/app-config":"a572974d76"}' | sha256sum → 2ef6a29b63, check d5b7a0
			if v, _ := f.templateHash(); v != configHash("v3") {
				t.Errorf("config-hash %q, want %s (ConfigMap/app-config holding v3)", v, configHash("v3"))
			}
		})
	}
}

// Our write's revision never becomes the newest (say its controller never renumbers the one it goes
// back to): the workload is not waited on for good; after a minute the write counts as undone, and
// the next change is acted on again (here refused until the newest revision is the template's, a
// retried error, not a silent wait).
func TestAWriteWhoseRevisionNeverComesIsNotWaitedOnForGood(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.edit("app-config", "v2")
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(1)
	f.deployment.Status.ObservedGeneration = f.deployment.Generation // observed, yet no revision for it
	f.putDeployment()
	if wait := f.sync(); wait != waitAgain {
		t.Fatalf("right after the write: wait %s, want %s (its revision is on the way)", wait, waitAgain)
	}
	f.tick(2 * time.Minute)
	if wait := f.sync(); wait != 0 {
		t.Fatalf("two minutes on: wait %s, want none: the write counts as undone", wait)
	}
	f.edit("app-config", "v3")
	f.tick(6 * time.Second)
	if _, err := f.c.sync(context.Background(), caches.Key(caches.Deployment, ns, "web")); !errors.Is(err, errNotCurrent) {
		t.Fatalf("the next change: %v, want %v (acted on, retried)", err, errNotCurrent)
	}
}
