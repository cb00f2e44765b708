package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// Stories -story selects.
const (
	storyAll          = "all"
	storyWriteUp      = "write-up"
	storyZeroTouch    = "zero-touch"
	storyConfigStarts = "config-starts"
)

// pinnedStory runs one story of the controller with -pinning (and the config trigger with trigger) in
// namespace ns: intro, then run. The
// controller stops and its webhook configuration and certificate go at the end, whatever happens; the
// namespace too unless keep. afterStep shows `configmap-attacher` commands after steps (show runs one).
func pinnedStory(ctx context.Context, c *framework.Cluster, b framework.Binary, ns string, keep, trigger bool, out io.Writer, intro string,
	run func(*walkthrough.Story, context.Context) error, afterStep func(ctx context.Context, step int, show func(context.Context, ...string) error) error) (err error) {
	if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
		return fmt.Errorf("namespace %s already exists: the demo only works in a namespace it creates (use -namespace)", ns)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	start := walkthrough.StartPinningController
	if trigger {
		start = walkthrough.StartTriggerController
	}
	ctrl, err := start(ctx, c, b, "configmap-attacher-demo-"+ns, ns)
	if err != nil {
		return err
	}
	defer func() {
		bg := context.Background()
		if e := ctrl.Stop(bg); e != nil && err == nil {
			err = fmt.Errorf("stopping the controller: %w", e)
		}
		if keep {
			return
		}
		// Snapshots carry the in-use finalizer, which only the controller (now stopped) or release
		// removes: release first, or the namespace would stay Terminating.
		if r := b.Run(bg, []string{"LOG_LEVEL=warn"}, "release", "-n", ns); r.Code != 0 && err == nil {
			err = fmt.Errorf("%s", r)
		}
		_ = c.DeleteNamespace(bg, ns)
	}()
	fmt.Fprintf(out, intro, walkthrough.PinnedConfigMap, ctrl.URL)
	s := &walkthrough.Story{C: c, Namespace: ns, Rollout: "demo", Out: out, Wait: 2 * time.Minute}
	show := func(ctx context.Context, args ...string) error {
		r := b.Run(ctx, []string{"LOG_LEVEL=warn"}, append(args, "-n", ns)...)
		fmt.Fprintf(out, "\n$ configmap-attacher %s\n%s", strings.Join(append(args, "-n", ns), " "), r.Stdout)
		if r.Code != 0 {
			return fmt.Errorf("%s", r)
		}
		return nil
	}
	s.AfterStep = func(ctx context.Context, step int) error { return afterStep(ctx, step, show) }
	return run(s, ctx)
}

// zeroTouch runs the second story: the write-up's canary with one static ConfigMap changed in place,
// the controller running with -pinning in namespace ns.
func zeroTouch(ctx context.Context, c *framework.Cluster, b framework.Binary, ns string, keep bool, out io.Writer) error {
	return pinnedStory(ctx, c, b, ns, keep, false, out, `

==== Zero-touch pinning: the same canary with ONE static ConfigMap, changed in place

No renaming and no Job: ConfigMap %[1]s keeps its name and is changed in place, with Helm's checksum
annotation on the pod template to roll the pods. The controller runs with -pinning (its webhook at
%[2]s): each new revision gets an immutable snapshot of %[1]s that it owns, and every new
pod is pointed at its own revision's snapshot. Trees show, per ReplicaSet, the snapshots it owns and how
many of its pods read each.
`, (*walkthrough.Story).ZeroTouch, func(ctx context.Context, step int, show func(context.Context, ...string) error) error {
		switch step {
		case 4: // aborted: which snapshot each revision reads, and what the aborted canary changed
			if err := show(ctx, "history", "rollout/demo"); err != nil {
				return err
			}
			return show(ctx, "diff", "rollout/demo")
		case 5: // drift: app-config changed, nothing runs it; what the next rollout would bring
			if err := show(ctx, "history", "rollout/demo"); err != nil {
				return err
			}
			return show(ctx, "diff", "rollout/demo", "1", "live")
		}
		return nil
	})
}

// configStarts runs the third story: the same canary with nothing but the ConfigMap edited, the
// Rollout opted in with Reloader's annotation, the controller running with -pinning and
// -reloader-annotations in namespace ns.
func configStarts(ctx context.Context, c *framework.Cluster, b framework.Binary, ns string, keep bool, out io.Writer) error {
	return pinnedStory(ctx, c, b, ns, keep, true, out, `

==== A config change starts the canary: nothing but the ConfigMap edited

No checksum annotation either: Rollout demo carries Reloader's own annotation,
reloader.stakater.com/auto: "true", and the team edits ConfigMap %[1]s in place and nothing else. The
controller (-pinning -reloader-annotations, webhook at %[2]s) writes one annotation on the Rollout's pod template,
configmap-attacher.io/config-hash, the hash of the content: Argo Rollouts starts the canary, the new
revision pins the new content, every older one keeps its own; a revert of the content goes back to the
revision that had it. Trees show each ReplicaSet's config-hash and snapshots.
`, (*walkthrough.Story).ConfigStarts, func(ctx context.Context, step int, show func(context.Context, ...string) error) error {
		if step == 5 { // reverted: back to revision 1, which the history shows running its own snapshot
			return show(ctx, "history", "rollout/demo")
		}
		return nil
	})
}
