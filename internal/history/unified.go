package history

import (
	"fmt"
	"io"
	"strings"
)

// maxCells bounds the longest-common-subsequence table (4 bytes a cell): past it, after trimming the
// common head and tail, the changed middle is shown as removed then added. Config values are rarely
// that large; a wrong-but-readable diff beats exhausting memory.
const maxCells = 16 << 20

type edit struct {
	op   byte // ' ', '-' or '+'
	line string
	// a and b are the lines of each side consumed before this edit (0-based positions).
	a, b int
}

// splitLines splits text after each newline; a last line without one keeps its lack of newline, so
// "x" and "x\n" differ as they do for the program reading the file.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// lineDiff returns an edit script from a to b, deletions before insertions within each change.
func lineDiff(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	am, bm := a[pre:len(a)-suf], b[pre:len(b)-suf]

	var out []edit
	ai, bi := 0, 0
	emit := func(op byte, line string) {
		out = append(out, edit{op: op, line: line, a: ai, b: bi})
		if op != '+' {
			ai++
		}
		if op != '-' {
			bi++
		}
	}
	for _, l := range a[:pre] {
		emit(' ', l)
	}
	for _, e := range middle(am, bm) {
		emit(e.op, e.line)
	}
	for _, l := range a[len(a)-suf:] {
		emit(' ', l)
	}
	return out
}

// middle diffs the changed middle by longest common subsequence.
func middle(a, b []string) []edit {
	n, m := len(a), len(b)
	var out []edit
	if n == 0 || m == 0 || (n+1)*(m+1) > maxCells {
		for _, l := range a {
			out = append(out, edit{op: '-', line: l})
		}
		for _, l := range b {
			out = append(out, edit{op: '+', line: l})
		}
		return out
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	w := m + 1
	lcs := make([]int32, (n+1)*w)
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	var dels, adds []edit
	flush := func() {
		out = append(append(out, dels...), adds...)
		dels, adds = dels[:0], adds[:0]
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			flush()
			out = append(out, edit{op: ' ', line: a[i]})
			i, j = i+1, j+1
		case j >= m || (i < n && lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
			dels = append(dels, edit{op: '-', line: a[i]})
			i++
		default:
			adds = append(adds, edit{op: '+', line: b[j]})
			j++
		}
	}
	flush()
	return out
}

// writeUnified prints a unified diff (GNU diff -u format, `context` lines around each change) of the
// texts a and b under the given file names ("/dev/null" for an absent side). It prints nothing when
// they are equal.
func writeUnified(w io.Writer, aName, bName, a, b string, context int, style Style) {
	edits := lineDiff(splitLines(a), splitLines(b))
	var changes []int
	for i, e := range edits {
		if e.op != ' ' {
			changes = append(changes, i)
		}
	}
	if len(changes) == 0 {
		return
	}
	fmt.Fprintln(w, style.paint(ansiBold, "--- "+aName))
	fmt.Fprintln(w, style.paint(ansiBold, "+++ "+bName))
	for k := 0; k < len(changes); {
		start := max(changes[k]-context, 0)
		end := changes[k]
		// Extend the hunk while at most 2*context unchanged lines separate it from the next change.
		for k < len(changes) && changes[k]-end-1 <= 2*context {
			end = changes[k]
			k++
		}
		end = min(end+context+1, len(edits))
		hunk := edits[start:end]
		aCount, bCount := 0, 0
		for _, e := range hunk {
			if e.op != '+' {
				aCount++
			}
			if e.op != '-' {
				bCount++
			}
		}
		fmt.Fprintln(w, style.paint(ansiCyan, fmt.Sprintf("@@ -%s +%s @@", hunkRange(hunk[0].a, aCount), hunkRange(hunk[0].b, bCount))))
		for _, e := range hunk {
			line := string(e.op) + strings.TrimSuffix(e.line, "\n")
			switch e.op {
			case '-':
				line = style.paint(ansiRed, line)
			case '+':
				line = style.paint(ansiGreen, line)
			}
			fmt.Fprintln(w, line)
			if !strings.HasSuffix(e.line, "\n") {
				fmt.Fprintln(w, `\ No newline at end of file`)
			}
		}
	}
}

// hunkRange formats one side of a hunk header as GNU diff does: an empty range names the line before.
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
