package webhookcert

import (
	"crypto/x509"
	"slices"
	"time"
)

// caPropagation is how long a CA must have been in the registered caBundle before a serving
// certificate it signed is served: kube-apiserver reads webhook configurations through an informer, so
// a changed bundle takes effect within seconds, not at once, and on every API server of the cluster.
const caPropagation = 30 * time.Second

// Requeue bounds: plan is cheap (no API call unless it writes), and the Secret and the configuration
// also requeue on every change.
const (
	minRequeue = time.Second
	maxRequeue = 10 * time.Minute
)

// distrustGrace is how long a distrusted CA stays in the bundle after the first serving certificate
// of another CA was stored: every replica loads it within RecheckPeriod, even one whose watch missed it.
const distrustGrace = 2 * RecheckPeriod

// state is everything one decision reads.
type state struct {
	now time.Time
	// stored is the Secret's content; exists tells an empty Secret from none.
	stored *authority
	exists bool
	// known is the last complete authority this process loaded or wrote (nil: none yet): replicas may
	// still serve a certificate it holds, so its CAs stay trusted if the Secret loses them.
	known *authority
	// registered is the caBundle the webhook configuration holds now.
	registered []*x509.Certificate
	// propagated reports whether a CA has been in the registered caBundle for caPropagation.
	propagated func(*x509.Certificate) bool
	// distrusted are the fingerprints (hex SHA-256 prefixes) of CAs an administrator named in the
	// Secret's DistrustAnnotation: they sign nothing more and leave the bundle once nothing they
	// signed is served.
	distrusted []string
	hosts      []string
	// validity is a serving certificate's lifetime; a CA lives caLifetimes of them.
	validity time.Duration
}

// decision is what to do: write is the Secret's new content (nil: nothing to write), why says what
// changed, requeue is when to look again.
type decision struct {
	write   *authority
	why     string
	requeue time.Duration
}

// plan decides the one next write that keeps every served certificate trusted. Steps, each a write of
// its own, in this order:
//
//	situation                                                    write
//	nothing served anywhere: no unexpired serving certificate    a serving certificate at once, from a CA
//	  in the Secret nor in this process's memory (first            we hold the key of (a new one if none),
//	  install, a reinstall beside a left-over configuration,       in a bundle of the CAs we hold keys of:
//	  a Secret restored from an old backup)                        a CA without its key trusts nobody we serve
//	no CA that may sign (none, its key lost, distrusted), or     a new CA, in the bundle beside the old
//	  the signing CA two-thirds through its life
//	a new CA registered for caPropagation                        it signs: a serving certificate from it
//	the serving certificate missing, two-thirds through, not     a serving certificate from the signing
//	  for these hosts, longer-lived than -validity, or signed      CA, if the API server trusts that CA
//	  by a distrusted CA
//	the Secret lost the signing CA's key this process knew       the key back
//	the bundle differs from what it should hold: an expired      the bundle brought up to date
//	  CA, a distrusted one whose certificates nobody serves
//	  any more (distrustGrace after the last was replaced),
//	  or a CA of a served certificate missing
//
// A Secret deleted by hand rotates everything: its CAs come back from what this process knew, a new CA
// joins them, and the old serving certificate is served until the new CA may sign. A CA is dropped for
// good by naming it in the Secret's DistrustAnnotation (docs/operations.md).
func plan(s state) (decision, error) {
	a := s.candidate()
	caLife := caLifetimes * s.validity

	switch {
	case !s.servedAnywhere():
		signer := a.signer
		if signer == nil || !s.now.Before(renewAt(signer.cert)) {
			signer = a.next
		}
		why := "made a serving certificate at once: nothing is served anywhere, so nothing can be refused for it"
		if signer == nil {
			ca, err := newCA(s.now, caLife)
			if err != nil {
				return decision{}, err
			}
			signer, why = ca, "made a CA and a serving certificate at once (nothing was served anywhere)"
		}
		serving, err := issue(signer, s.hosts, s.now, s.validity)
		if err != nil {
			return decision{}, err
		}
		return s.done(&authority{bundle: []*x509.Certificate{signer.cert}, signer: signer, serving: serving}, why)

	case a.next == nil && (a.signer == nil || !s.now.Before(renewAt(a.signer.cert)) || !s.exists):
		next, err := newCA(s.now, caLife)
		if err != nil {
			return decision{}, err
		}
		a.next = next
		a.bundle = append(a.bundle, next.cert)
		why := "added a new CA to the bundle; it signs once registered for " + caPropagation.String()
		if !s.exists {
			why = "the certificate Secret was gone: " + why
		}
		return s.done(a, why)

	case a.next != nil && s.propagated(a.next.cert):
		serving, err := issue(a.next, s.hosts, s.now, s.validity)
		if err != nil {
			return decision{}, err
		}
		a.signer, a.next, a.serving = a.next, nil, serving
		return s.done(a, "the new CA is registered: it signs the serving certificate from now on")
	}

	if why := s.servingDue(a); why != "" && s.maySign(a) {
		serving, err := issue(a.signer, s.hosts, s.now, s.validity)
		if err != nil {
			return decision{}, err
		}
		a.serving = serving
		return s.done(a, "renewed the serving certificate: "+why)
	}
	switch {
	case !samePair(a.signer, s.stored.signer) || !samePair(a.next, s.stored.next):
		return s.done(a, "restored the CA key this process knew")
	case !slices.EqualFunc(a.bundle, s.stored.bundle, (*x509.Certificate).Equal):
		return s.done(a, "brought the bundle up to date: expired and distrusted CAs dropped, CAs of served certificates kept")
	}
	return decision{requeue: s.requeue(a)}, nil
}

// servedAnywhere reports whether a serving certificate may be served by some replica: the Secret's or
// the last this process knew, unexpired. When none is, no replica can answer a handshake whatever the
// API server trusts, and waiting for a new CA to propagate would only prolong the refusals.
func (s state) servedAnywhere() bool {
	return len(s.servedLeaves()) > 0
}

// servedLeaves are the unexpired serving certificates replicas may serve.
func (s state) servedLeaves() []*x509.Certificate {
	var leaves []*x509.Certificate
	for _, a := range []*authority{s.stored, s.known} {
		if leaf := servingLeaf(a); leaf != nil && s.now.Before(leaf.NotAfter) {
			leaves = append(leaves, leaf)
		}
	}
	return leaves
}

// distrusts reports whether an administrator distrusted c.
func (s state) distrusts(c *x509.Certificate) bool {
	return slices.ContainsFunc(s.distrusted, func(fp string) bool { return MatchesFingerprint(c, fp) })
}

// mayStillServe reports whether a certificate ca signed may be served by a replica: one of the served
// leaves is, or the newest was stored less than distrustGrace ago and its predecessor may still be.
func (s state) mayStillServe(ca *x509.Certificate) bool {
	if slices.ContainsFunc(s.servedLeaves(), func(l *x509.Certificate) bool { return signedBy(l, ca) }) {
		return true
	}
	leaf := servingLeaf(s.stored)
	return leaf != nil && s.now.Sub(issuedAt(leaf)) < distrustGrace
}

// candidate is the stored authority with expired CAs dropped and every CA a replica may still serve a
// certificate of kept, and the signing CA this process knew if the Secret lost it: those this process
// knew (the Secret may have lost them, or been deleted) and the registered CAs that signed a served
// certificate. A distrusted CA signs nothing and stays only while a certificate it signed may be served.
func (s state) candidate() *authority {
	a := &authority{signer: s.stored.signer, next: s.stored.next, serving: s.stored.serving}
	if s.known != nil {
		if !s.exists {
			a.serving = s.known.serving
		}
		if a.signer == nil {
			// Deleted, or its key lost: the key this process had signs on until a new CA may.
			a.signer = s.known.signer
		}
	}
	bundle := slices.Clone(s.stored.bundle)
	add := func(c *x509.Certificate) {
		if !slices.ContainsFunc(bundle, c.Equal) {
			bundle = append(bundle, c)
		}
	}
	leaves := s.servedLeaves()
	if s.known != nil {
		for _, c := range s.known.bundle {
			add(c)
		}
	}
	for _, c := range s.registered {
		if slices.ContainsFunc(leaves, func(l *x509.Certificate) bool { return signedBy(l, c) }) {
			add(c)
		}
	}
	for _, c := range bundle {
		if s.now.Before(c.NotAfter) && (!s.distrusts(c) || s.mayStillServe(c)) {
			a.bundle = append(a.bundle, c)
		}
	}
	for _, p := range []**keyPair{&a.signer, &a.next} {
		if *p != nil && (!a.trusts((*p).cert) || s.distrusts((*p).cert)) {
			*p = nil
		}
	}
	if a.serving != nil && !s.now.Before(a.serving.Leaf.NotAfter) {
		a.serving = nil
	}
	return a
}

// servingDue says why the serving certificate must be replaced, or "".
func (s state) servingDue(a *authority) string {
	switch leaf := servingLeaf(a); {
	case leaf == nil:
		return "none"
	case !s.now.Before(renewAt(leaf)):
		return "two thirds of its life passed"
	case !covers(leaf, s.hosts):
		return "it does not name every host"
	case leaf.NotAfter.Sub(s.now) > s.validity:
		return "it outlives -webhook-cert-validity"
	case !slices.ContainsFunc(a.bundle, func(ca *x509.Certificate) bool { return signedBy(leaf, ca) }):
		return "its CA is not in the bundle"
	case slices.ContainsFunc(a.bundle, func(ca *x509.Certificate) bool { return s.distrusts(ca) && signedBy(leaf, ca) }):
		return "its CA is distrusted"
	case a.signer != nil && !signedBy(leaf, a.signer.cert):
		return "another CA signs now"
	}
	return ""
}

// maySign reports whether a certificate the signing CA signs would be trusted by the API server now:
// the CA has been registered long enough, or it signed the certificate served now.
func (s state) maySign(a *authority) bool {
	if a.signer == nil {
		return false
	}
	if s.propagated(a.signer.cert) {
		return true
	}
	leaf := servingLeaf(a)
	return leaf != nil && signedBy(leaf, a.signer.cert)
}

func (s state) done(a *authority, why string) (decision, error) {
	return decision{write: a, why: why, requeue: minRequeue}, nil
}

// requeue is how long until a step may be due: a renewal, a rollover, a promotion, an expiry.
func (s state) requeue(a *authority) time.Duration {
	next := s.now.Add(maxRequeue)
	at := func(t time.Time) {
		if t.Before(next) {
			next = t
		}
	}
	if leaf := servingLeaf(a); leaf != nil {
		at(renewAt(leaf))
	}
	if a.signer != nil {
		at(renewAt(a.signer.cert))
	}
	if a.next != nil {
		at(s.now.Add(caPropagation / 6))
	}
	for _, c := range a.bundle {
		at(c.NotAfter)
		if leaf := servingLeaf(a); leaf != nil && s.distrusts(c) {
			at(issuedAt(leaf).Add(distrustGrace))
		}
	}
	return min(max(next.Sub(s.now), minRequeue), maxRequeue)
}

func servingLeaf(a *authority) *x509.Certificate {
	if a == nil || a.serving == nil {
		return nil
	}
	return a.serving.Leaf
}

func samePair(a, b *keyPair) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.cert.Equal(b.cert)
}
