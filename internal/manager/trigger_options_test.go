package manager

import (
	"flag"
	"io"
	"testing"
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
		o := NewOptions(func(string) (string, bool) { return "", false })
		fs := flag.NewFlagSet("controller", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := o.TriggerEnabled(); got != tc.want {
			t.Errorf("%v: trigger on %v, want %v", tc.args, got, tc.want)
		}
	}
}
