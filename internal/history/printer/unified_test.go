package printer

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestWriteUnified(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want string
	}{
		{name: "equal", a: "x\ny\n", b: "x\ny\n", want: ""},
		{name: "insert at the start", a: "b\nc\n", b: "a\nb\nc\n", want: "@@ -1,2 +1,3 @@\n+a\n b\n c\n"},
		{name: "delete everything", a: "a\nb\n", b: "", want: "@@ -1,2 +0,0 @@\n-a\n-b\n"},
		{name: "only the final newline changes", a: "a\nb", b: "a\nb\n",
			want: "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"},
		{name: "deletions before insertions", a: "1\n2\n3\n", b: "1\nx\ny\n3\n",
			want: "@@ -1,3 +1,4 @@\n 1\n-2\n+x\n+y\n 3\n"},
		{name: "changes 6 lines apart share a hunk", a: lines(1, 10), b: strings.Replace(strings.Replace(lines(1, 10), "2\n", "two\n", 1), "8\n", "eight\n", 1),
			want: "@@ -1,10 +1,10 @@\n 1\n-2\n+two\n 3\n 4\n 5\n 6\n 7\n-8\n+eight\n 9\n 10\n"},
		{name: "changes 7 lines apart get two hunks", a: lines(1, 12), b: strings.Replace(strings.Replace(lines(1, 12), "2\n", "two\n", 1), "\n10\n", "\nten\n", 1),
			want: "@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -7,6 +7,6 @@\n 7\n 8\n 9\n-10\n+ten\n 11\n 12\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeUnified(&b, "a/x", "b/x", tt.a, tt.b, 3, Style{})
			got := b.String()
			if tt.want != "" {
				tt.want = "--- a/x\n+++ b/x\n" + tt.want
			}
			if got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintln(&b, i)
	}
	return b.String()
}

// TestUnifiedApplies checks, on random texts, that the printed hunks turn a into b exactly when applied
// as patch(1) would, with correct line counts in every header.
func TestUnifiedApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	text := func() string {
		var b strings.Builder
		for n := r.IntN(25); n > 0; n-- {
			fmt.Fprintf(&b, "line %d\n", r.IntN(6))
		}
		s := b.String()
		if s != "" && r.IntN(4) == 0 {
			s = strings.TrimSuffix(s, "\n")
		}
		return s
	}
	for i := 0; i < 2000; i++ {
		a, b := text(), text()
		var out bytes.Buffer
		writeUnified(&out, "a/x", "b/x", a, b, r.IntN(4), Style{})
		got, err := apply(a, out.String())
		if err != nil {
			t.Fatalf("case %d: %v\na=%q\nb=%q\ndiff:\n%s", i, err, a, b, out.String())
		}
		if got != b {
			t.Fatalf("case %d: applying the diff gives %q, want %q\ndiff:\n%s", i, got, b, out.String())
		}
	}
}

// apply applies a unified diff of one file to a, checking hunk headers against their bodies.
func apply(a, diff string) (string, error) {
	if diff == "" {
		return a, nil
	}
	src := splitLines(a)
	var out []string
	pos := 0
	dl := strings.SplitAfter(diff, "\n")
	dl = dl[2 : len(dl)-1] // --- and +++ headers; the final "" after the last newline
	for i := 0; i < len(dl); {
		var as, ac, bs, bc int
		h := strings.TrimSuffix(dl[i], "\n")
		if _, err := fmt.Sscanf(h, "@@ -%s +%s @@", new(string), new(string)); err != nil {
			return "", fmt.Errorf("bad hunk header %q", h)
		}
		f := strings.Fields(h)
		as, ac = parseRange(f[1][1:])
		bs, bc = parseRange(f[2][1:])
		start := as - 1
		if ac == 0 {
			start = as
		}
		if start < pos {
			return "", fmt.Errorf("hunk %q overlaps the previous one", h)
		}
		out = append(out, src[pos:start]...)
		pos = start
		i++
		gotA, gotB := 0, 0
		for i < len(dl) && !strings.HasPrefix(dl[i], "@@") {
			l := dl[i]
			i++
			body := l[1:]
			if i < len(dl) && strings.HasPrefix(dl[i], `\ No newline`) {
				body = strings.TrimSuffix(body, "\n")
				i++
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(src) || src[pos] != body {
					return "", fmt.Errorf("line %d: context %q does not match %q", pos+1, body, src[min(pos, len(src)-1)])
				}
				pos++
				gotA++
				if l[0] == ' ' {
					out = append(out, body)
					gotB++
				}
			case '+':
				out = append(out, body)
				gotB++
			default:
				return "", fmt.Errorf("bad line %q", l)
			}
		}
		if gotA != ac || gotB != bc {
			return "", fmt.Errorf("hunk %q has %d/%d lines", h, gotA, gotB)
		}
		_ = bs
	}
	out = append(out, src[pos:]...)
	return strings.Join(out, ""), nil
}

func parseRange(s string) (start, count int) {
	count = 1
	if a, b, ok := strings.Cut(s, ","); ok {
		s = a
		count, _ = strconv.Atoi(b)
	}
	start, _ = strconv.Atoi(s)
	return start, count
}
