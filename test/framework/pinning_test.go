package framework

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A port FreeLoopbackPort hands out is free and outside the kernel's ephemeral range, which any bind to
// port 0 and any outgoing connection draw from between the check and the caller's bind.
func TestFreeLoopbackPortIsNotAnEphemeralPort(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no ephemeral port range to read: %v", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Fatalf("ip_local_port_range %q", b)
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatalf("ip_local_port_range %q: %v", b, err)
	}
	for range 20 {
		p, err := FreeLoopbackPort()
		if err != nil {
			t.Fatal(err)
		}
		if p >= low {
			t.Fatalf("port %d is in the ephemeral range (from %d): a bind to port 0 may take it before the caller binds it", p, low)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		_ = ln.Close()
	}
}
