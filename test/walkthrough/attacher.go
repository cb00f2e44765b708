package walkthrough

import (
	"context"
	"fmt"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Attacher is how a story's config gets attached after each deploy.
type Attacher interface {
	Name() string
	// AfterDeploy runs once the Rollout's spec names the new config.
	AfterDeploy(ctx context.Context, ns, rollout string, configMaps []string) error
}

// Job runs the real binary with exactly the original Job's arguments.
type Job struct {
	Bin framework.Binary
	// Runs collects every run, for the closing figures and for debugging.
	Runs []framework.Result
}

func (j *Job) Name() string { return "job" }

func (j *Job) AfterDeploy(ctx context.Context, ns, rollout string, configMaps []string) error {
	r := j.Bin.Run(ctx, nil, "-rollout", rollout, "-namespace", ns, "-configmaps", strings.Join(configMaps, ","))
	j.Runs = append(j.Runs, r)
	if r.Code != 0 {
		return fmt.Errorf("the attacher Job failed: %s", r)
	}
	return nil
}

// Controller relies on a running `configmap-attacher controller`: nothing to run per deploy.
type Controller struct{}

func (Controller) Name() string { return "controller" }

func (Controller) AfterDeploy(context.Context, string, string, []string) error { return nil }

// None attaches nothing: the negative control showing the story's assertions bite.
type None struct{}

func (None) Name() string { return "none" }

func (None) AfterDeploy(context.Context, string, string, []string) error { return nil }
