package printer

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// DiffOptions say how WriteDiff prints.
type DiffOptions struct {
	// ShowSecrets prints Secret values; without it only keys and value hashes are shown.
	ShowSecrets bool
	// SecretKey keys the HMAC-SHA256 shown in place of Secret values. A plain hash of a short password
	// lets anyone holding the output guess the password offline, so the key is random per run (empty
	// means: make one): a hash means "same or different value" within one output, nothing more.
	SecretKey []byte
	// Context is the number of unchanged lines around each change.
	Context int
	Style
}

// DefaultContext is diff -u's.
const DefaultContext = 3

// WriteDiff prints the comparison: per config object, a unified diff of each changed key.
func WriteDiff(w io.Writer, c *history.Comparison, o DiffOptions) error {
	if !o.ShowSecrets && len(o.SecretKey) == 0 {
		o.SecretKey = make([]byte, 32)
		if _, err := rand.Read(o.SecretKey); err != nil {
			return err
		}
	}
	ew := &errWriter{w: w}
	d := &differ{w: ew, c: c, o: o}
	d.write()
	return ew.err
}

type differ struct {
	w         io.Writer
	c         *history.Comparison
	o         DiffOptions
	changed   bool
	unchanged []string
}

func (d *differ) printf(format string, args ...any) { fmt.Fprintf(d.w, format, args...) }

func side(s history.Side) string {
	if s.Role == history.RoleLive {
		return "live (pinned objects as they are now: what a new revision would get)"
	}
	return fmt.Sprintf("revision %d (ReplicaSet %s, %s)", s.Revision, s.ReplicaSet, s.Role)
}

// sideName is how the closing line names a side.
func sideName(s history.Side) string {
	if s.Role == history.RoleLive {
		return "the live objects"
	}
	return fmt.Sprintf("revision %d", s.Revision)
}

func (d *differ) write() {
	c := d.c
	d.printf("%s\n", d.o.paint(ansiBold, fmt.Sprintf("%s: %s -> %s", c.Workload, side(c.From), side(c.To))))
	for _, p := range c.Pairs {
		d.pair(p)
	}
	if !d.changed {
		d.printf("\nNo config differences between %s and %s.\n", sideName(c.From), sideName(c.To))
	}
	if len(d.unchanged) > 0 {
		d.printf("\nUnchanged: %s\n", strings.Join(d.unchanged, ", "))
	}
}

func kubectlName(kind refs.Kind, name string) string {
	return strings.ToLower(string(kind)) + "/" + name
}

func (d *differ) title(p history.Pair, format string, args ...any) {
	d.changed = true
	what := fmt.Sprintf("%s %s", p.Kind, p.OriginalName)
	if pinned(p) {
		what += " (pinned)"
	}
	d.printf("\n%s\n", d.o.paint(ansiBold, what+": "+fmt.Sprintf(format, args...)))
}

// pinned reports whether either side references the pair's object as a pinned one.
func pinned(p history.Pair) bool {
	return (p.From != nil && p.From.Pinned != "") || (p.To != nil && p.To.Pinned != "")
}

// label names what a side's pods read: the object, a pinned object's snapshot, or a pinned object
// read live (no snapshot).
func label(m *history.Member) string {
	if m.Pinned != "" && !m.Snapshot() {
		return m.Name + " (live)"
	}
	return m.Name
}

// gone explains why one side's content cannot be shown.
func (d *differ) gone(m *history.Member, s history.Side) {
	msg := fmt.Sprintf("%s (%s) does not exist: deleted, or garbage-collected with the ReplicaSets it was attached to; its content cannot be shown.", m.Name, sideName(s))
	if m.Optional {
		d.printf("  %s\n", msg+" It is optional: pods start without it.")
		return
	}
	d.printf("  %s\n", d.o.paint(ansiRed, msg))
}

func (d *differ) pair(p history.Pair) {
	f, t := p.From, p.To
	from, to := d.c.From, d.c.To
	switch {
	case f == nil:
		d.title(p, "added in %s: %s", sideName(to), label(t))
		if t.Object == nil {
			d.gone(t, to)
			return
		}
		d.content(p, nil, t.Object.Content)
	case t == nil:
		d.title(p, "removed in %s (%s used %s)", sideName(to), sideName(from), label(f))
		if f.Object == nil {
			d.gone(f, from)
			return
		}
		d.content(p, f.Object.Content, nil)
	case f.Name == t.Name:
		if f.Object == nil {
			d.title(p, "%s in both revisions", label(f))
			d.gone(f, from)
			return
		}
		// One object serves both revisions: nothing can differ (a change to it reaches both). A
		// pinned object's snapshot is shared the same way when its content did not change.
		u := kubectlName(p.Kind, f.Name)
		if f.Snapshot() {
			u += fmt.Sprintf(" (snapshot of %s, both sides)", f.Pinned)
		}
		d.unchanged = append(d.unchanged, u)
	case f.Object == nil || t.Object == nil:
		d.title(p, "%s -> %s", label(f), label(t))
		if f.Object == nil {
			d.gone(f, from)
		}
		if t.Object == nil {
			d.gone(t, to)
		}
	case sameContent(f.Object.Content, t.Object.Content):
		d.unchanged = append(d.unchanged, fmt.Sprintf("%s -> %s (same content)", kubectlName(p.Kind, label(f)), label(t)))
	default:
		d.title(p, "%s -> %s", label(f), label(t))
		d.content(p, f.Object.Content, t.Object.Content)
	}
}

// content prints the key-by-key difference; a nil side is an object the revision does not use.
func (d *differ) content(p history.Pair, a, b *history.Content) {
	if a != nil && b != nil && a.Type != b.Type {
		d.printf("  type: %s -> %s\n", a.Type, b.Type)
	}
	hidden := p.Kind == refs.Secret && !d.o.ShowSecrets
	var rows [][3]string
	for _, k := range unionKeys(a, b) {
		av, aok := value(a, k)
		bv, bok := value(b, k)
		if aok && bok && bytes.Equal(av, bv) && binary(a, k) == binary(b, k) {
			continue
		}
		if hidden {
			rows = append(rows, d.hiddenRow(k, av, aok, bv, bok))
			continue
		}
		aName, bName := "/dev/null", "/dev/null"
		if aok {
			aName = fmt.Sprintf("a/%s/%s/%s", p.Kind, p.OriginalName, k)
		}
		if bok {
			bName = fmt.Sprintf("b/%s/%s/%s", p.Kind, p.OriginalName, k)
		}
		if (aok && binary(a, k)) || (bok && binary(b, k)) || (p.Kind == refs.Secret && !(isText(av) && isText(bv))) {
			d.printf("%s\n%s\n", d.o.paint(ansiBold, "--- "+aName), d.o.paint(ansiBold, "+++ "+bName))
			d.printf("Binary value: %s -> %s\n", describeBinary(av, aok), describeBinary(bv, bok))
			continue
		}
		if len(av) == 0 && len(bv) == 0 {
			// An empty value added or removed: no line to show, so say it.
			d.printf("%s\n%s\n(empty value)\n", d.o.paint(ansiBold, "--- "+aName), d.o.paint(ansiBold, "+++ "+bName))
			continue
		}
		writeUnified(d.w, aName, bName, string(av), string(bv), d.o.Context, d.o.Style)
	}
	if !hidden {
		return
	}
	width := 0
	for _, r := range rows {
		width = max(width, len(r[1]))
	}
	for _, r := range rows {
		line := fmt.Sprintf("  %-8s %-*s  %s", r[0], width, r[1], r[2])
		switch r[0] {
		case "added":
			line = d.o.paint(ansiGreen, line)
		case "removed":
			line = d.o.paint(ansiRed, line)
		default:
			line = d.o.paint(ansiYellow, line)
		}
		d.printf("%s\n", line)
	}
	if len(rows) > 0 {
		d.printf("  (values hidden, shown as keyed hashes comparable within this output only; --show-secrets prints them)\n")
	}
}

func (d *differ) hiddenRow(k string, av []byte, aok bool, bv []byte, bok bool) [3]string {
	switch {
	case !aok:
		return [3]string{"added", k, d.secretHash(bv)}
	case !bok:
		return [3]string{"removed", k, d.secretHash(av)}
	}
	return [3]string{"changed", k, d.secretHash(av) + " -> " + d.secretHash(bv)}
}

func (d *differ) secretHash(v []byte) string {
	m := hmac.New(sha256.New, d.o.SecretKey)
	m.Write(v)
	return "hmac:" + hex.EncodeToString(m.Sum(nil))[:8]
}

func describeBinary(v []byte, ok bool) string {
	if !ok {
		return "(none)"
	}
	sum := sha256.Sum256(v)
	return fmt.Sprintf("%d bytes (sha256 %s)", len(v), hex.EncodeToString(sum[:])[:8])
}

func value(c *history.Content, k string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	v, ok := c.Data[k]
	return v, ok
}

func binary(c *history.Content, k string) bool { return c != nil && c.Binary[k] }

// isText reports whether a Secret value reads as text; other bytes would garble a terminal.
func isText(v []byte) bool { return utf8.Valid(v) && bytes.IndexByte(v, 0) < 0 }

func unionKeys(a, b *history.Content) []string {
	seen := map[string]bool{}
	for _, c := range []*history.Content{a, b} {
		if c == nil {
			continue
		}
		for k := range c.Data {
			seen[k] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sameContent(a, b *history.Content) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Type != b.Type || len(a.Data) != len(b.Data) {
		return false
	}
	for k, v := range a.Data {
		w, ok := b.Data[k]
		if !ok || !bytes.Equal(v, w) || a.Binary[k] != b.Binary[k] {
			return false
		}
	}
	return true
}

// errWriter keeps the first write error, so printing code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}
