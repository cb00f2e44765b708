package framework

import "testing"

// The controller's "serving" lines as its text and JSON handlers write them (internal/manager/server.go).
func TestServingAddress(t *testing.T) {
	cases := []struct{ name, logs, server, want string }{
		{"text", "time=2026-11-28T02:44:08.863Z level=INFO msg=serving server=metrics address=127.0.0.1:40091\n" +
			"time=2026-11-28T02:44:08.863Z level=INFO msg=serving server=probes address=127.0.0.1:33885\n", "probes", "127.0.0.1:33885"},
		{"json", `{"time":"2026-11-28T02:44:08Z","level":"INFO","msg":"serving","server":"probes","address":"127.0.0.1:33885"}` + "\n", "probes", "127.0.0.1:33885"},
		{"another server only", "msg=serving server=metrics address=127.0.0.1:40091\n", "probes", ""},
		{"not logged yet", "msg=\"configmap-attacher starting\"\n", "metrics", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &Process{}
			p.logs.WriteString(c.logs)
			if got := p.ServingAddress(c.server); got != c.want {
				t.Fatalf("ServingAddress(%q) = %q; want %q", c.server, got, c.want)
			}
		})
	}
}
