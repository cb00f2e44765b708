package printer

import (
	"fmt"
	"io"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

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

// writeUnified prints a unified diff (GNU diff -u format, `context` lines around each change) of the
// texts a and b under the given file names ("/dev/null" for an absent side). It prints nothing when
// they are equal. The edit script is difflib's (a port of Python's difflib, already in our module
// graph through client-go); this only prints it: headers, colors, and GNU's marker for a last line
// without a newline, which difflib's own writer drops.
func writeUnified(w io.Writer, aName, bName, a, b string, context int, style Style) {
	al, bl := splitLines(a), splitLines(b)
	// No auto-junk: config files repeat lines ("}") and those must still anchor the diff.
	groups := difflib.NewMatcherWithJunk(al, bl, false, nil).GetGroupedOpCodes(context)
	if len(groups) == 0 {
		return
	}
	fmt.Fprintln(w, style.paint(ansiBold, "--- "+aName))
	fmt.Fprintln(w, style.paint(ansiBold, "+++ "+bName))
	for _, g := range groups {
		first, last := g[0], g[len(g)-1]
		fmt.Fprintln(w, style.paint(ansiCyan, fmt.Sprintf("@@ -%s +%s @@", hunkRange(first.I1, last.I2), hunkRange(first.J1, last.J2))))
		for _, op := range g {
			if op.Tag == 'e' {
				printLines(w, ' ', al[op.I1:op.I2], style)
				continue
			}
			// Within a change, deletions come before insertions, as GNU diff prints them.
			printLines(w, '-', al[op.I1:op.I2], style)
			printLines(w, '+', bl[op.J1:op.J2], style)
		}
	}
}

func printLines(w io.Writer, op byte, lines []string, style Style) {
	for _, l := range lines {
		line := string(op) + strings.TrimSuffix(l, "\n")
		switch op {
		case '-':
			line = style.paint(ansiRed, line)
		case '+':
			line = style.paint(ansiGreen, line)
		}
		fmt.Fprintln(w, line)
		if !strings.HasSuffix(l, "\n") {
			fmt.Fprintln(w, `\ No newline at end of file`)
		}
	}
}

// hunkRange formats the lines [start, stop) of one side as GNU diff does: a single line by its
// number alone, an empty range by the line before it.
func hunkRange(start, stop int) string {
	switch n := stop - start; n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprint(start + 1)
	default:
		return fmt.Sprintf("%d,%d", start+1, n)
	}
}
