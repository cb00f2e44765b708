//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// The original write-up, with the real binary run exactly as the original Job runs it.
func TestWalkthroughWithTheJob(t *testing.T) {
	t.Parallel()
	s := story(t, "devops-apps-01", jobAttacher())
	must(t, s.Walkthrough(context.Background()))
}

func TestRevisionHistoryLimitPrunesConfigWithTheJob(t *testing.T) {
	t.Parallel()
	s := story(t, "history-limit-job", jobAttacher())
	must(t, s.HistoryLimit(context.Background()))
}

func TestAbortKeepsStableConfigWithTheJob(t *testing.T) {
	t.Parallel()
	s := story(t, "abort-job", jobAttacher())
	must(t, s.Abort(context.Background()))
}

func TestUndoFindsOldConfigWithTheJob(t *testing.T) {
	t.Parallel()
	s := story(t, "undo-job", jobAttacher())
	must(t, s.Undo(context.Background()))
}

// The same stories with the controller instead of a Job per deploy.
func TestWalkthroughWithTheController(t *testing.T) {
	t.Parallel()
	s := story(t, "walkthrough-controller", walkthrough.Controller{})
	startController(t, nil, s.Namespace)
	must(t, s.Walkthrough(context.Background()))
}

func TestRevisionHistoryLimitPrunesConfigWithTheController(t *testing.T) {
	t.Parallel()
	s := story(t, "history-limit-controller", walkthrough.Controller{})
	startController(t, nil, s.Namespace)
	must(t, s.HistoryLimit(context.Background()))
}

func TestAbortAndUndoWithTheController(t *testing.T) {
	t.Parallel()
	abort := story(t, "abort-controller", walkthrough.Controller{})
	undo := story(t, "undo-controller", walkthrough.Controller{})
	startController(t, nil, abort.Namespace, undo.Namespace)
	must(t, abort.Abort(context.Background()))
	must(t, undo.Undo(context.Background()))
}

// Negative control: without an attacher the walkthrough must fail at its garbage-collection step,
// proving that step asserts.
func TestWalkthroughFailsWithoutAttaching(t *testing.T) {
	t.Parallel()
	s := story(t, "no-attacher", walkthrough.None{})
	s.SkipAttachChecks = true
	s.Wait = 30 * time.Second
	err := s.Walkthrough(context.Background())
	if err == nil || !strings.Contains(err.Error(), "to be garbage collected") {
		t.Fatalf("want a failure at the garbage-collection step, got: %v", err)
	}
	t.Logf("failed as it must: %v", err)
}

// Negative control: the classic approach (one ConfigMap updated in place, a checksum annotation to roll
// pods) fails the spot-replacement step: the old ReplicaSet's new pod reads the new, faulty config.
func TestClassicChecksumApproachSpreadsTheFaultyConfig(t *testing.T) {
	t.Parallel()
	s := story(t, "classic-checksum", walkthrough.None{})
	s.Classic, s.SkipAttachChecks = true, true
	err := s.Walkthrough(context.Background())
	if err == nil || !strings.Contains(err.Error(), "must read the OLD config") {
		t.Fatalf("want a failure at the spot-replacement step, got: %v", err)
	}
	t.Logf("failed as it must: %v", err)
}
