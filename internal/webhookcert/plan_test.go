package webhookcert

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

var (
	t0    = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	hosts = []string{"127.0.0.1"}
	year  = 365 * 24 * time.Hour
)

// always and never stand for propagated.
func always(*x509.Certificate) bool { return true }
func never(*x509.Certificate) bool  { return false }

// installed is what a first install writes at t0 for validity.
func installed(t *testing.T, validity time.Duration) *authority {
	t.Helper()
	d, err := plan(state{now: t0, stored: &authority{}, propagated: never, hosts: hosts, validity: validity})
	if err != nil {
		t.Fatal(err)
	}
	if d.write == nil {
		t.Fatal("a first install wrote nothing")
	}
	return d.write
}

// verifies checks that leaf is a serving certificate for host that roots trust at now, by crypto/x509's
// own chain verification: what kube-apiserver does with a caBundle.
func verifies(leaf *x509.Certificate, roots []*x509.Certificate, host string, now time.Time) error {
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func TestAFirstInstallMakesACAThatOutlivesItsServingCertificate(t *testing.T) {
	a := installed(t, year)
	if len(a.bundle) != 1 || a.signer == nil || a.next != nil || a.serving == nil {
		t.Fatalf("first install: bundle %d, signer %v, next %v, serving %v; want one CA signing one serving certificate", len(a.bundle), a.signer != nil, a.next != nil, a.serving != nil)
	}
	if err := verifies(a.serving.Leaf, a.bundle, "127.0.0.1", t0); err != nil {
		t.Fatalf("the serving certificate does not verify against the bundle: %v", err)
	}
	if got := a.serving.Leaf.NotAfter.Sub(t0); got != year {
		t.Fatalf("serving certificate lives %s; want %s", got, year)
	}
	if got := a.signer.cert.NotAfter.Sub(t0); got != 10*year {
		t.Fatalf("CA lives %s; want ten years", got)
	}
}

// Each row starts from a first install and looks again later, or after something happened to the Secret.
func TestPlan(t *testing.T) {
	const validity = 90 * 24 * time.Hour // a CA of 900 days: two-thirds at 600
	type result struct {
		write, newServing, newCA, signerChanged bool
		bundle                                  int
	}
	for _, tc := range []struct {
		name       string
		at         time.Duration
		edit       func(a *authority) (stored *authority, exists bool)
		propagated func(*x509.Certificate) bool
		forget     bool // this process knows nothing: a new leader
		want       result
	}{
		{name: "early in the serving certificate's life: nothing", at: 10 * 24 * time.Hour, propagated: always,
			want: result{bundle: 1}},
		{name: "two thirds through the serving certificate: a new one from the same CA", at: 61 * 24 * time.Hour, propagated: always,
			want: result{write: true, newServing: true, bundle: 1}},
		{name: "two thirds through, the CA not registered yet: it signed what is served, so still renewed", at: 61 * 24 * time.Hour, propagated: never,
			want: result{write: true, newServing: true, bundle: 1}},
		{name: "two thirds through the CA: a new CA joins the bundle, the old one still signs", at: 601 * 24 * time.Hour, propagated: always,
			edit: func(a *authority) (*authority, bool) { // its serving certificate renewed on time meanwhile
				s, _ := issue(a.signer, hosts, t0.Add(600*24*time.Hour), validity)
				return &authority{bundle: a.bundle, signer: a.signer, serving: s}, true
			},
			want: result{write: true, newCA: true, bundle: 2}},
		{name: "the serving certificate deleted: a new one from the registered CA", at: time.Hour, propagated: always,
			edit: func(a *authority) (*authority, bool) { return &authority{bundle: a.bundle, signer: a.signer}, true },
			want: result{write: true, newServing: true, bundle: 1}},
		{name: "the serving certificate deleted, its CA not registered: wait", at: time.Hour, propagated: never,
			edit: func(a *authority) (*authority, bool) { return &authority{bundle: a.bundle, signer: a.signer}, true },
			want: result{bundle: 1}},
		{name: "the CA's key deleted: the key this process knew goes back", at: time.Hour, propagated: always,
			edit: func(a *authority) (*authority, bool) { return &authority{bundle: a.bundle, serving: a.serving}, true },
			want: result{write: true, bundle: 1}},
		{name: "the CA's key deleted, and this process new: a new CA joins the bundle, the serving certificate stays", at: time.Hour, propagated: always, forget: true,
			edit: func(a *authority) (*authority, bool) { return &authority{bundle: a.bundle, serving: a.serving}, true },
			want: result{write: true, newCA: true, signerChanged: true, bundle: 2}},
		{name: "the Secret deleted: a new CA joins the known ones, the served certificate stays", at: time.Hour, propagated: always,
			edit: func(a *authority) (*authority, bool) { return &authority{}, false },
			want: result{write: true, newCA: true, bundle: 2}},
		{name: "served for other hosts: a new one from the same CA", at: time.Hour, propagated: always,
			edit: func(a *authority) (*authority, bool) {
				s, _ := issue(a.signer, []string{"old.svc"}, t0, validity)
				return &authority{bundle: a.bundle, signer: a.signer, serving: s}, true
			},
			want: result{write: true, newServing: true, bundle: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := installed(t, validity)
			stored, exists := a, true
			if tc.edit != nil {
				stored, exists = tc.edit(a)
			}
			known := a
			if tc.forget {
				known = nil
			}
			d, err := plan(state{now: t0.Add(tc.at), stored: stored, exists: exists, known: known, registered: a.bundle,
				propagated: tc.propagated, hosts: hosts, validity: validity})
			if err != nil {
				t.Fatal(err)
			}
			got := result{write: d.write != nil, bundle: len(stored.bundle)}
			if w := d.write; w != nil {
				got.bundle = len(w.bundle)
				got.newServing = w.serving != nil && !w.serving.Leaf.Equal(a.serving.Leaf) &&
					(stored.serving == nil || !w.serving.Leaf.Equal(stored.serving.Leaf))
				got.newCA = w.next != nil
				got.signerChanged = !samePair(w.signer, a.signer)
				if w.serving != nil {
					if err := verifies(w.serving.Leaf, w.bundle, hosts[0], t0.Add(tc.at)); err != nil {
						t.Fatalf("the serving certificate written does not verify against its bundle: %v", err)
					}
					if got.newServing && err == nil && verifies(w.serving.Leaf, a.bundle, hosts[0], t0.Add(tc.at)) != nil {
						t.Fatal("a new serving certificate was signed by a CA the registered bundle lacks")
					}
				}
			}
			if got != tc.want {
				t.Fatalf("%s: got %+v; want %+v", d.why, got, tc.want)
			}
		})
	}
}

// A rollover across the CA's end: the new CA signs only once registered long enough; the old CA stays
// in the bundle until it expires, then goes.
func TestACARolloverSignsWithTheNewCAOnlyOnceRegisteredAndDropsTheOldAtItsEnd(t *testing.T) {
	validity := time.Hour // a CA of 10 hours
	a := installed(t, validity)
	old := a.signer
	at := t0.Add(6*time.Hour + 41*time.Minute) // past two thirds of the CA
	a.serving, _ = issue(old, hosts, at.Add(-time.Minute), validity)
	d, err := plan(state{now: at, stored: a, exists: true, registered: a.bundle, propagated: always, hosts: hosts, validity: validity})
	if err != nil || d.write == nil || d.write.next == nil {
		t.Fatalf("past two thirds of the CA: %+v, %v; want a new CA", d, err)
	}
	rolled := d.write
	next := rolled.next
	isNext := func(c *x509.Certificate) bool { return c.Equal(next.cert) }
	d, err = plan(state{now: at.Add(time.Second), stored: rolled, exists: true, registered: rolled.bundle,
		propagated: func(c *x509.Certificate) bool { return !isNext(c) }, hosts: hosts, validity: validity})
	if err != nil || d.write != nil {
		t.Fatalf("the new CA not yet propagated: wrote %+v (%v); want nothing", d.write, err)
	}
	d, err = plan(state{now: at.Add(time.Minute), stored: rolled, exists: true, registered: rolled.bundle, propagated: always, hosts: hosts, validity: validity})
	if err != nil || d.write == nil || !samePair(d.write.signer, next) || d.write.next != nil || !signedBy(d.write.serving.Leaf, next.cert) {
		t.Fatalf("the new CA propagated: %+v (%v); want it to sign a new serving certificate", d.write, err)
	}
	promoted := d.write
	if len(promoted.bundle) != 2 {
		t.Fatalf("after the switch the bundle holds %d CAs; want the old one kept beside the new", len(promoted.bundle))
	}
	end := old.cert.NotAfter.Add(time.Second)
	promoted.serving, _ = issue(next, hosts, end.Add(-time.Minute), validity)
	d, err = plan(state{now: end, stored: promoted, exists: true, registered: promoted.bundle, propagated: always, hosts: hosts, validity: validity})
	if err != nil || d.write == nil || len(d.write.bundle) != 1 || !d.write.bundle[0].Equal(next.cert) {
		t.Fatalf("after the old CA's end: %+v (%v); want the bundle to hold the new CA alone", d.write, err)
	}
}

// Nothing served anywhere (no unexpired serving certificate in the Secret or in this process's memory):
// no replica can answer a handshake, so waiting for a new CA to propagate would only prolong refusals. A
// serving certificate is made at once, from a CA whose key is held; a registered CA without its key
// trusts nobody we serve and leaves the bundle.
func TestNothingServedAnywhereIsServedAtOnce(t *testing.T) {
	old := installed(t, year)
	at := t0.Add(time.Hour)
	for _, tc := range []struct {
		name       string
		stored     *authority
		exists     bool
		registered []*x509.Certificate
		sameCA     bool
	}{
		{name: "a reinstall beside the configuration an uninstall without hooks left (its CA's key gone with the Secret)",
			stored: &authority{}, registered: old.bundle},
		{name: "the Secret restored from an old backup: its certificate expired, its CA's key there",
			stored: func() *authority {
				expired, _ := issue(old.signer, hosts, t0.Add(-2*year), year)
				return &authority{bundle: old.bundle, signer: old.signer, serving: expired}
			}(), exists: true, registered: old.bundle, sameCA: true},
		{name: "the Secret emptied of its certificate by a new process, its CA never registered",
			stored: &authority{bundle: old.bundle, signer: old.signer}, exists: true, sameCA: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := plan(state{now: at, stored: tc.stored, exists: tc.exists, registered: tc.registered, propagated: never, hosts: hosts, validity: year})
			if err != nil || d.write == nil || d.write.serving == nil {
				t.Fatalf("%+v, %v; want a serving certificate written at once", d, err)
			}
			w := d.write
			if err := verifies(w.serving.Leaf, w.bundle, hosts[0], at); err != nil {
				t.Fatalf("the certificate does not verify against the bundle written with it: %v", err)
			}
			if got := signedBy(w.serving.Leaf, old.signer.cert); got != tc.sameCA {
				t.Fatalf("signed by the CA whose key the Secret holds: %v; want %v", got, tc.sameCA)
			}
			if !tc.sameCA && slices.ContainsFunc(w.bundle, old.bundle[0].Equal) {
				t.Fatal("the registered CA without its key stayed in the bundle")
			}
			if len(w.bundle) != 1 || w.next != nil {
				t.Fatalf("bundle of %d CAs, next %v; want the signing CA alone", len(w.bundle), w.next != nil)
			}
		})
	}
}

// A CA named in the Secret's distrust annotation (its key leaked) signs nothing more: a new CA joins the
// bundle, signs once registered, every replica moves to its certificate, and the distrusted CA leaves
// the bundle distrustGrace later. At every step the certificate stored verifies against the bundle
// stored, so no replica is refused on the way.
func TestADistrustedCAIsRolledOverThenDropped(t *testing.T) {
	const validity = 90 * 24 * time.Hour
	a := installed(t, validity)
	bad := a.signer.cert
	distrusted := []string{hex.EncodeToString(func() []byte { s := sha256.Sum256(bad.Raw); return s[:] }())[:16]}
	now := t0.Add(time.Hour)
	stored := a
	step := func(registered []*x509.Certificate, propagated func(*x509.Certificate) bool, what string) decision {
		t.Helper()
		d, err := plan(state{now: now, stored: stored, exists: true, known: stored, registered: registered,
			propagated: propagated, distrusted: distrusted, hosts: hosts, validity: validity})
		if err != nil {
			t.Fatal(err)
		}
		if d.write != nil {
			if err := verifies(d.write.serving.Leaf, d.write.bundle, hosts[0], now); err != nil {
				t.Fatalf("%s: the stored certificate does not verify against the stored bundle: %v", what, err)
			}
			stored = d.write
		}
		return d
	}
	d := step(a.bundle, always, "distrusted")
	if d.write == nil || d.write.next == nil || !d.write.serving.Leaf.Equal(a.serving.Leaf) || !slices.ContainsFunc(d.write.bundle, bad.Equal) {
		t.Fatalf("distrusted: %+v; want a new CA beside it, the served certificate unchanged until the new CA may sign", d)
	}
	next := d.write.next.cert
	now = now.Add(time.Second)
	if d := step(stored.bundle, func(c *x509.Certificate) bool { return !c.Equal(next) }, "not registered yet"); d.write != nil {
		t.Fatalf("the new CA not registered yet: wrote %q; want nothing", d.why)
	}
	now = now.Add(caPropagation)
	d = step(stored.bundle, always, "registered")
	if d.write == nil || !signedBy(d.write.serving.Leaf, next) || !slices.ContainsFunc(d.write.bundle, bad.Equal) {
		t.Fatalf("the new CA registered: %+v; want it to sign the served certificate, the distrusted CA still trusted for replicas not moved yet", d)
	}
	now = now.Add(distrustGrace / 2)
	if d := step(stored.bundle, always, "within the grace"); d.write != nil {
		t.Fatalf("within the grace: wrote %q; want nothing", d.why)
	}
	now = now.Add(distrustGrace)
	d = step(stored.bundle, always, "after the grace")
	if d.write == nil || slices.ContainsFunc(d.write.bundle, bad.Equal) || len(d.write.bundle) != 1 {
		t.Fatalf("after the grace: %+v; want the distrusted CA out of the bundle", d)
	}
	now = now.Add(time.Hour)
	if d := step(stored.bundle, always, "later"); d.write != nil {
		t.Fatalf("later: wrote %q; want nothing (the CA must not come back from memory or the registration)", d.why)
	}
}

func TestParseDistrust(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"0123456789abcdef", []string{"0123456789abcdef"}},
		{" 01:23:45:67:89:AB:CD:EF:00 , xyz, 0123", []string{"0123456789abcdef00"}},
	} {
		if got := ParseDistrust(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("ParseDistrust(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// A year of a 30-second certificate (and a 5-minute CA), compressed: the leader plans every second,
// kube-apiserver takes up to 5 s to see a new caBundle, each of two replicas loads the Secret up to 2 s
// late, and the Secret is deleted, emptied of its serving certificate or of its CA key, and the
// caBundle wiped, at random. At every second each replica's certificate must verify against the
// caBundle kube-apiserver holds — except for the wipe itself, which only the restore can end.
func TestRotationNeverServesACertificateTheAPIServerRejects(t *testing.T) {
	const (
		validity  = MinValidity
		apiDelay  = 5 * time.Second
		steps     = 3600
		maxReload = 2
	)
	rng := rand.New(rand.NewPCG(2026, 11))
	c := &Controller{seen: map[string]time.Time{}}
	type change struct {
		at     time.Time
		bundle []*x509.Certificate
	}
	var (
		stored     = &authority{}
		exists     = false
		history    []*authority // stored, per second
		registered []*x509.Certificate
		changes    []change
		known      *authority
		replicas   = []*Serving{NewServing(), NewServing()}
		now        time.Time
		lastWipe   = time.Time{}
		rotations  int
		rollovers  int
	)
	register := func(now time.Time, b []*x509.Certificate) {
		if slices.EqualFunc(b, registered, (*x509.Certificate).Equal) {
			return
		}
		registered = slices.Clone(b)
		changes = append(changes, change{at: now, bundle: registered})
	}
	effective := func(now time.Time) []*x509.Certificate { // what kube-apiserver uses
		var b []*x509.Certificate
		for _, ch := range changes {
			if !ch.at.Add(apiDelay).After(now) {
				b = ch.bundle
			}
		}
		return b
	}
	for _, r := range replicas {
		r.now = func() time.Time { return now }
		// What its cache shows: the newest registration, before kube-apiserver uses it.
		r.registered = func() ([]*x509.Certificate, bool) { return registered, true }
	}
	for i := range steps {
		now = t0.Add(time.Duration(i) * time.Second)
		switch r := rng.IntN(400); {
		case r == 0 && exists:
			stored, exists = &authority{}, false
		case r == 1 && exists:
			stored = &authority{bundle: stored.bundle, signer: stored.signer, next: stored.next}
		case r == 2 && exists:
			stored = &authority{bundle: stored.bundle, next: stored.next, serving: stored.serving}
		case r == 3 && len(registered) > 0:
			register(now, nil)
			lastWipe = now
		}
		d, err := plan(state{now: now, stored: stored, exists: exists, known: known, registered: registered,
			propagated: c.observe(registered, now), hosts: hosts, validity: validity})
		if err != nil {
			t.Fatal(err)
		}
		if d.write != nil {
			if d.write.next != nil && (stored.next == nil || !d.write.next.cert.Equal(stored.next.cert)) {
				rollovers++
			}
			if d.write.serving != nil && (stored.serving == nil || !d.write.serving.Leaf.Equal(stored.serving.Leaf)) {
				rotations++
			}
			stored, exists = d.write, true
		}
		if len(stored.bundle) > 0 {
			known = stored
		}
		register(now, stored.bundle)
		history = append(history, stored)
		for r := range replicas {
			replicas[r].Load(secretOf(t, history[max(0, len(history)-1-rng.IntN(maxReload+1))]))
			served := replicas[r].current.Load()
			if served == nil {
				continue
			}
			if !lastWipe.IsZero() && now.Sub(lastWipe) <= apiDelay {
				continue // the wipe reached kube-apiserver before our restore did
			}
			if now.Sub(t0) <= apiDelay {
				continue // the first install: nothing was trusted before its first bundle
			}
			if err := verifies(served.Leaf, effective(now), hosts[0], now); err != nil {
				t.Fatalf("second %d: replica %d serves a certificate kube-apiserver rejects: %v", i, r, err)
			}
		}
	}
	if rotations < steps/25 || rollovers < steps/400 {
		t.Fatalf("%d serving certificates and %d CA rollovers in %d s; want a new certificate every ~20 s and a new CA every ~200 s", rotations, rollovers, steps)
	}
	t.Logf("%d s: %d serving certificates, %d new CAs, every second verified", steps, rotations, rollovers)
}

// secretOf is the Secret holding a.
func secretOf(t *testing.T, a *authority) *corev1.Secret {
	t.Helper()
	data, err := a.data()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{Data: data}
}

// A replica whose clock is five minutes behind the leader's, and whose watch delivers no event at all,
// looks at the Secret every RecheckPeriod: it serves each new certificate within that period of its
// storing, and never one expired by the leader's (the API server's) clock.
func TestAReplicaWithAClockBehindServesEachNewCertificateWithinItsRecheck(t *testing.T) {
	const validity = 2 * time.Minute // replaced every 80 s
	const skew = 5 * time.Minute
	stored, storedAt := installed(t, validity), t0
	replica := NewServing()
	var now time.Time
	replica.now = func() time.Time { return now.Add(-skew) }
	rotations := 0
	for i := range 3600 {
		now = t0.Add(time.Duration(i) * time.Second)
		d, err := plan(state{now: now, stored: stored, exists: true, known: stored, registered: stored.bundle,
			propagated: always, hosts: hosts, validity: validity})
		if err != nil {
			t.Fatal(err)
		}
		if d.write != nil {
			stored, storedAt = d.write, now
			rotations++
		}
		if i%int(RecheckPeriod/time.Second) == 0 {
			replica.Load(secretOf(t, stored))
		}
		cur := replica.current.Load()
		switch {
		case cur == nil:
			t.Fatalf("second %d: the replica serves nothing", i)
		case !now.Before(cur.Leaf.NotAfter):
			t.Fatalf("second %d: the replica serves a certificate that expired at %s", i, cur.Leaf.NotAfter.Format(time.TimeOnly))
		case !cur.Leaf.Equal(stored.serving.Leaf) && now.Sub(storedAt) >= RecheckPeriod:
			t.Fatalf("second %d: the certificate stored %s ago is not served yet", i, now.Sub(storedAt))
		}
	}
	if rotations < 40 {
		t.Fatalf("%d certificates in an hour; want one every 80 s", rotations)
	}
}
