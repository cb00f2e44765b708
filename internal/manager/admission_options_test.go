package manager

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// -pinning-admission takes exactly auto, policy and webhook; only the webhook needs an address up
// front (auto learns at start whether it does).
func TestPinningAdmissionFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-pinning"}, ""}, // auto: policy where served; the start says if the webhook needs an address
		{[]string{"-pinning", "-pinning-admission=policy"}, ""},
		{[]string{"-pinning", "-pinning-admission=webhook"}, "-pinning needs -webhook-url"},
		{[]string{"-pinning", "-pinning-admission=webhook", "-webhook-url=https://127.0.0.1:9443"}, ""},
		{[]string{"-pinning", "-pinning-admission=Policy"}, `-pinning-admission "Policy": use auto, policy or webhook`},
		{[]string{"-pinning", "-pinning-admission=policy", "-pinning-table-max-bytes=100"}, "-pinning-table-max-bytes 100 is too small"},
	} {
		o := NewOptions(func(string) (string, bool) { return "", false })
		fs := flag.NewFlagSet("controller", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.Validate()
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.err)
		}
	}
}
