package trigger

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// The values of config-hash we write prove themselves: "<hash>.<check>", where <hash> is the hash of
// the content (ten hex digits, "-<n>" added when that value is taken by a revision made with other
// content: plan.go) and <check> the first six hex digits of the SHA-256 of checkInput and <hash>.
// A value on a template that carries a valid check was written by us (or copied from a template we
// wrote: a rollback), whatever the record says, so a restart that lost the record never takes our own
// value for someone else's. By hand:
//
//	printf '%s' 'configmap-attacher.io/config-hash:58c69207a7' | sha256sum | cut -c1-6   # 225dd3: 58c69207a7.225dd3
//
// Not keyed: what a check protects against is a value nobody meant as ours (a hand edit, another
// tool's hash), not a forgery, which would gain its author nothing a write of the template does not
// (we only ever take our one annotation back, at a content change). Unkeyed, a value is provable
// while the hash key is unreadable or gone, and without one (-secrets=false).
const checkInput = "configmap-attacher.io/config-hash:"

// checkLength is how many hex digits the check has: one value in 16.7 million passes by chance.
const checkLength = 6

// base is the hash part a value of ours has: ten hex digits, "-<n>" when taken.
var base = regexp.MustCompile(`^[0-9a-f]{10}(-[1-9][0-9]*)?$`)

// valueOf is the value written for content hash h, the n-th of its name (1: no suffix).
func valueOf(h string, n int) string {
	b := h
	if n > 1 {
		b = fmt.Sprintf("%s-%d", h, n)
	}
	return b + "." + check(b)
}

func check(b string) string {
	sum := sha256.Sum256([]byte(checkInput + b))
	return hex.EncodeToString(sum[:])[:checkLength]
}

// proves reports whether v is a value of ours by its check.
func proves(v string) bool {
	b, c, ok := strings.Cut(v, ".")
	return ok && base.MatchString(b) && c == check(b)
}

// contentHashOf is the content hash a value of ours was written for ("" for a value that does not
// prove itself ours, or one before the check whose hash is its whole value: contentHashOf knows only
// values that prove themselves).
func contentHashOf(v string) string {
	if !proves(v) {
		return ""
	}
	h, _, _ := strings.Cut(v, ".")
	h, _, _ = strings.Cut(h, "-")
	return h
}
