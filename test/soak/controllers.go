package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The controller under test: two replicas of the real binary electing a leader on one Lease, as the
// chart runs it, both serving the webhook behind one address (a proxy playing the chart's Service),
// with serving certificates replaced every 40 s. Each replica's logs go to controller-<i>.log in the
// work dir, across restarts.

const leaseName = "configmap-attacher-soak"

// certValidity is the replicas' -webhook-cert-validity: a new serving certificate every 40 s and a new
// CA every 400 s, all through the run.
const certValidity = time.Minute

type replica struct {
	i        int
	p        *framework.Process
	log      string
	offset   int64 // where this start's logs begin in log
	killed   bool  // by the soak, on purpose
	identity string
	probes   string
	port     int // its pinning webhook's, on 127.0.0.1, kept across restarts
}

type controllers struct {
	s        *soak
	replicas [2]*replica
	down     bool // killed by a controller-kill step, not yet restarted
	upAt     int  // the step at which a killed controller comes back
	starts   int
	policy   string // the webhook's failurePolicy the replicas start with
	// lastAllReady is when every replica was last seen ready (pinning.go's disrupted windows).
	lastAllReady time.Time
	// proxy is the address the webhook is registered at: the chart's Service, played on loopback.
	proxy *framework.ServiceProxy
}

func newControllers(s *soak) *controllers {
	c := &controllers{s: s, policy: "Fail", lastAllReady: time.Now()}
	for i := range c.replicas {
		c.replicas[i] = &replica{i: i, log: filepath.Join(s.o.workDir, fmt.Sprintf("controller-%d.log", i))}
	}
	return c
}

// args are the controller's flags: as the chart's, with pinning served at the replica's own port and
// registered at the proxy's URL (-webhook-bind-address with -webhook-url).
func (c *controllers) args(r *replica) []string {
	pinning := []string{"-pinning", "-pinning-admission=policy"} // policy.go
	if !c.s.admissionPolicy() {
		pinning = []string{"-pinning", "-pinning-admission=webhook", "-webhook-url=https://" + c.proxy.Addr, fmt.Sprintf("-webhook-bind-address=127.0.0.1:%d", r.port),
			"-webhook-cert-validity", certValidity.String(), "-webhook-failure-policy", c.policy}
	}
	return append(append([]string{"controller"}, pinning...),
		"-webhook-configuration-name", webhookConfiguration,
		"-namespaces", strings.Join(namespaces, ","),
		// The Job mode attaches these workloads' ReplicaSets; protection still covers them.
		"-replicaset-selector", attachLabel+"!=job",
		"-leader-elect=true", "-leader-election-namespace", leaseNamespace, "-leader-election-id", leaseName,
		"-leader-election-lease-duration", "6s", "-leader-election-renew-deadline", "4s", "-leader-election-retry-period", "1s",
		"-metrics-bind-address", "127.0.0.1:0", "-health-probe-bind-address", "127.0.0.1:0",
		// The config trigger (its own switch) at its default settle window, which trigger.go judges by.
		"-reloader-annotations", "-config-settle", configSettle.String())
}

func (c *controllers) start(ctx context.Context, r *replica) error {
	if fi, err := os.Stat(r.log); err == nil {
		r.offset = fi.Size()
	}
	c.starts++
	if !c.s.admissionPolicy() {
		if err := c.serve(ctx); err != nil {
			return err
		}
	}
	args := c.args(r)
	p, err := c.s.bin.StartLogged(ctx, []string{"LOG_LEVEL=info", "VERSION=soak", "POD_NAMESPACE=" + leaseNamespace}, r.log,
		fmt.Sprintf("start %d of replica %d at step %d: %s", c.starts, r.i, c.s.step, strings.Join(args, " ")), args...)
	if err != nil {
		return err
	}
	r.p, r.killed, r.identity, r.probes = p, false, "", ""
	return nil
}

// serve chooses the replicas' ports and starts the proxy in front of them, once.
func (c *controllers) serve(ctx context.Context) error {
	if c.proxy != nil {
		return nil
	}
	var backends []string
	for _, r := range c.replicas {
		port, err := framework.FreeLoopbackPort()
		if err != nil {
			return err
		}
		r.port = port
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", port))
	}
	proxy, err := framework.StartServiceProxy(ctx, backends...)
	if err != nil {
		return err
	}
	c.proxy = proxy
	return nil
}

func (c *controllers) startAll(ctx context.Context) error {
	for _, r := range c.replicas {
		if err := c.start(ctx, r); err != nil {
			return err
		}
	}
	c.down = false
	return nil
}

// logs returns what the replica printed since its last start.
func (r *replica) logs() string {
	b, err := os.ReadFile(r.log)
	if err != nil || int64(len(b)) < r.offset {
		return ""
	}
	return string(b[r.offset:])
}

var (
	identityRe = regexp.MustCompile(`waiting for the leader Lease.*identity=(\S+)`)
	probesRe   = regexp.MustCompile(`serving.*server=probes.*address=(\S+)`)
)

// learn reads the replica's Lease identity and probe address from its logs.
func (r *replica) learn() {
	if r.identity != "" && r.probes != "" {
		return
	}
	l := r.logs()
	if m := identityRe.FindStringSubmatch(l); m != nil {
		r.identity = strings.Trim(m[1], `"`)
	}
	if m := probesRe.FindStringSubmatch(l); m != nil {
		r.probes = strings.Trim(m[1], `"`)
	}
}

func (r *replica) running() bool { return r.p != nil && !r.p.Exited() }

// leader returns the replica holding the Lease, or nil.
func (c *controllers) leader(ctx context.Context) *replica {
	lease, err := c.s.c.Kube.CoordinationV1().Leases(leaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return nil
	}
	for _, r := range c.replicas {
		r.learn()
		if r.running() && r.identity != "" && r.identity == *lease.Spec.HolderIdentity {
			return r
		}
	}
	return nil
}

// waitReady waits until a running replica holds the Lease and its caches have synced (its /readyz).
func (c *controllers) waitReady(ctx context.Context, timeout time.Duration) error {
	return framework.Eventually(ctx, timeout, "a controller leader with synced caches", func(ctx context.Context) (bool, string, error) {
		l := c.leader(ctx)
		if l == nil {
			return false, "no running replica holds the Lease", nil
		}
		if l.probes == "" {
			return false, "leader's probe address not logged yet", nil
		}
		resp, err := http.Get("http://" + l.probes + "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		// Once it logged "became leader", /readyz answers for its caches (before, for a standby).
		return resp.StatusCode == http.StatusOK && strings.Contains(l.logs(), "became leader"), "leader not synced yet", nil
	})
}

// ready reports whether the replica runs and its /readyz answers 200: caches synced and, with
// pinning, the webhook served and registered.
func (r *replica) ready() bool {
	r.learn()
	if !r.running() || r.probes == "" {
		return false
	}
	resp, err := http.Get("http://" + r.probes + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// allReady reports whether every replica is ready.
func (c *controllers) allReady(context.Context) bool {
	for _, r := range c.replicas {
		if !r.ready() {
			return false
		}
	}
	return true
}

// killServing kill -9s a replica serving the webhook, the standby if one runs (leader-kill takes the
// leader), and starts it again at once; the proxy sends new connections to the other meanwhile. nil
// when none runs.
func (c *controllers) killServing(ctx context.Context) (*replica, error) {
	var r *replica
	leader := c.leader(ctx)
	for _, x := range c.replicas {
		if x.running() && (r == nil || x != leader) {
			r = x
		}
	}
	if r == nil {
		return nil, nil
	}
	r.killed = true
	r.p.Kill()
	return r, c.start(ctx, r)
}

// rollingRestart restarts the replicas one after the other with the webhook's failurePolicy, each
// gracefully stopped and waited for, as a Deployment's rolling update does.
func (c *controllers) rollingRestart(ctx context.Context, policy string) error {
	c.policy = policy
	for _, r := range c.replicas {
		if r.running() {
			r.killed = true
			_ = r.p.Stop()
		}
		if err := c.start(ctx, r); err != nil {
			return err
		}
		if err := framework.Eventually(ctx, 2*time.Minute, fmt.Sprintf("replica %d ready", r.i), func(context.Context) (bool, string, error) {
			return r.ready(), "not ready", nil
		}); err != nil {
			return err
		}
	}
	return c.waitReady(ctx, 2*time.Minute)
}

// supervise restarts replicas that exited without the soak killing them, as a Deployment would, and
// says so: that is worth a look (a replica that loses its Lease exits on purpose, e.g. after a long
// API server outage).
func (c *controllers) supervise(ctx context.Context) []string {
	if c.down {
		return nil
	}
	var notes []string
	for _, r := range c.replicas {
		if r.p == nil || !r.p.Exited() || r.killed {
			continue
		}
		c.s.crashes++
		notes = append(notes, fmt.Sprintf("replica %d exited on its own (%v: %s); restarted",
			r.i, r.p.ExitErr(), exitReason(r.logs())))
		if err := c.start(ctx, r); err != nil {
			notes = append(notes, "restart failed: "+err.Error())
		}
	}
	return notes
}

// killAll is a controller crash: kill -9 of every replica; they come back at step upAt.
func (c *controllers) killAll(upAt int) {
	for _, r := range c.replicas {
		if r.running() {
			r.killed = true
			r.p.Kill()
		}
	}
	c.down, c.upAt = true, upAt
}

// killLeader kill -9s the Lease holder and starts it again (its pod restarted); the standby should
// take over within the lease duration. It returns the killed replica, or nil when no replica held
// the Lease.
func (c *controllers) killLeader(ctx context.Context) (*replica, error) {
	l := c.leader(ctx)
	if l == nil {
		return nil, nil
	}
	l.killed = true
	l.p.Kill()
	return l, c.start(ctx, l)
}

// stop ends every replica gracefully.
func (c *controllers) stop() {
	for _, r := range c.replicas {
		if r.running() {
			r.killed = true
			_ = r.p.Stop()
		}
	}
}

// exitReason is the error line the binary printed last (`configmap-attacher controller: error: …`),
// else its last log line: informers log after the error as they stop.
func exitReason(logs string) string {
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "configmap-attacher") && strings.Contains(lines[i], "error:") {
			return lines[i]
		}
	}
	return "last log line: " + lines[len(lines)-1]
}
