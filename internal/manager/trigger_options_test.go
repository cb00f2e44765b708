package manager

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// -reloader-annotations is the config trigger's own switch: off by default, on with or without
// -pinning, and -pinning alone does not turn it on.
func TestReloaderAnnotationsIsTheTriggersOwnSwitch(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-pinning", "-webhook-url=https://127.0.0.1:9443"}, false},
		{[]string{"-reloader-annotations"}, true},
		{[]string{"-reloader-annotations=true", "-pinning", "-webhook-url=https://127.0.0.1:9443"}, true},
		{[]string{"-reloader-annotations=false", "-pinning", "-webhook-url=https://127.0.0.1:9443"}, false},
	} {
		o, err := parseOptions(t, tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := o.TriggerEnabled(); got != tc.want {
			t.Errorf("%v: trigger on %v, want %v", tc.args, got, tc.want)
		}
	}
}

// -config-max-wait bounds how long a change waits to settle: by default ten settle windows (the
// trigger fills 0 in), never shorter than one.
func TestConfigMaxWaitIsAtLeastTheSettleWindow(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    time.Duration
		invalid string
	}{
		{args: []string{"-reloader-annotations"}, want: 0},
		{args: []string{"-reloader-annotations", "-config-settle=1s", "-config-max-wait=30s"}, want: 30 * time.Second},
		{args: []string{"-reloader-annotations", "-config-settle=5s", "-config-max-wait=2s"}, invalid: "-config-max-wait 2s is shorter than -config-settle 5s"},
		{args: []string{"-reloader-annotations", "-config-max-wait=-1s"}, invalid: "-config-max-wait -1s is shorter than -config-settle 2s"},
	} {
		o, err := parseOptions(t, tc.args)
		switch {
		case tc.invalid != "" && (err == nil || !strings.Contains(err.Error(), tc.invalid)):
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.invalid)
		case tc.invalid == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.invalid == "" && o.Trigger.MaxWait != tc.want:
			t.Errorf("%v: max wait %s, want %s", tc.args, o.Trigger.MaxWait, tc.want)
		}
	}
}

// parseOptions parses the controller's flags and validates them.
func parseOptions(t *testing.T, args []string) (*Options, error) {
	t.Helper()
	o := NewOptions(func(string) (string, bool) { return "", false })
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return o, o.Validate()
}
