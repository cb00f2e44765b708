package caches

import (
	"strings"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// refList is a list of config references in one string: for each, a letter for its kind and its name,
// the references separated by NUL (a name never holds one). A []refs.Ref of three references is a
// 96-byte array and three names; this is one string of their length: ~100 bytes less for each
// revision whose list is its own (most old ReplicaSets: each reads a config revision of its own).
type refList string

const refSep = "\x00"

var kindLetters = map[refs.Kind]byte{refs.ConfigMap: 'C', refs.Secret: 'S'}

func makeRefList(rs []refs.Ref) refList {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteString(refSep)
		}
		letter, ok := kindLetters[r.Kind]
		if !ok {
			letter = '?'
		}
		b.WriteByte(letter)
		b.WriteString(r.Name)
	}
	return refList(b.String())
}

// refs returns the list's references (their names are parts of the list's string); nil when empty.
func (l refList) refs() []refs.Ref {
	if l == "" {
		return nil
	}
	out := make([]refs.Ref, 0, strings.Count(string(l), refSep)+1)
	for item := range strings.SplitSeq(string(l), refSep) {
		kind := refs.Kind("")
		for k, letter := range kindLetters {
			if item[0] == letter {
				kind = k
			}
		}
		out = append(out, refs.Ref{Kind: kind, Name: item[1:]})
	}
	return out
}

// has reports whether the list holds item (a kind's letter and a name), without making the list.
func (l refList) has(item string) bool {
	s := string(l)
	for s != "" {
		next, rest, _ := strings.Cut(s, refSep)
		if next == item {
			return true
		}
		s = rest
	}
	return false
}
