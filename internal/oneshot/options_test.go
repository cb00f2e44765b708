package oneshot

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func parseOptions(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	o := NewOptions()
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.Validate()
}

func TestOriginalInvocationStillWorks(t *testing.T) {
	o, err := parseOptions(t, "-rollout", "demo", "-namespace", "devops-apps-01", "-configmaps", "demo-cm-2648648036,demo-env-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Workload(); got != (workload.Ref{Kind: workload.Rollout, Namespace: "devops-apps-01", Name: "demo"}) {
		t.Errorf("workload = %v", got)
	}
	want := []refs.Ref{{Kind: refs.ConfigMap, Name: "demo-cm-2648648036"}, {Kind: refs.ConfigMap, Name: "demo-env-1"}}
	if got := o.Targets(); !reflect.DeepEqual(got, want) {
		t.Errorf("targets = %v, want %v", got, want)
	}
}

func TestDoubleDashAndNewFlags(t *testing.T) {
	o, err := parseOptions(t, "--deployment=web", "--namespace", "ns", "--secrets", "s1", "--timeout", "90s", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if o.Workload().Kind != workload.Deployment || o.Timeout.Seconds() != 90 || !o.DryRun {
		t.Errorf("options = %+v", o)
	}
	if got := o.Targets(); !reflect.DeepEqual(got, []refs.Ref{{Kind: refs.Secret, Name: "s1"}}) {
		t.Errorf("targets = %v", got)
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no flags", nil, "one of -rollout or -deployment is required"},
		{"no namespace", []string{"-rollout", "demo", "-configmaps", "a"}, "-namespace is required"},
		{"nothing to attach", []string{"-rollout", "demo", "-namespace", "ns"}, "nothing to attach"},
		{"both workloads", []string{"-rollout", "a", "-deployment", "b", "-namespace", "ns", "-configmaps", "a"}, "exclusive"},
		{"empty list", []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", ""}, "-configmaps is empty"},
		{"empty name", []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", "a,"}, "empty name at position 2"},
		{"duplicate", []string{"-rollout", "demo", "-namespace", "ns", "-secrets", "s,s"}, `lists "s" twice`},
		{"invalid name", []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", "Demo_CM"}, `"Demo_CM" is not a valid Kubernetes name`},
		{"invalid namespace", []string{"-rollout", "demo", "-namespace", "NS!", "-configmaps", "a"}, "not a valid namespace"},
		{"invalid workload name", []string{"-rollout", "de mo", "-namespace", "ns", "-configmaps", "a"}, `-rollout "de mo" is not a valid name`},
		{"bad timeout", []string{"-rollout", "demo", "-namespace", "ns", "-configmaps", "a", "-timeout", "0s"}, "must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseOptions(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestUnparseableFlags(t *testing.T) {
	for _, args := range [][]string{{"-timeout", "ninety"}, {"-configmaps", "a", "-configmaps", "b"}} {
		if _, err := parseOptions(t, args...); err == nil {
			t.Errorf("%v parsed without error", args)
		}
	}
}
