package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// page is a Markdown file read the way the checks need it: its lines, which of them are inside
// fenced code blocks, its inline code spans and links outside them, and its anchors.
type page struct {
	path  string // relative to the repository, with slashes
	lines []string
	// fenced[i] is true for a line inside a fenced code block (the fences included).
	fenced  []bool
	spans   []span
	links   []link
	anchors map[string]bool
}

// span is an inline code span, outside fenced blocks.
type span struct {
	line    int // 1-based
	content string
}

type link struct {
	line   int
	target string
}

var (
	fenceRE   = regexp.MustCompile("^\\s*(```+|~~~+)")
	headingRE = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	codeRE    = regexp.MustCompile("(`+)(.+?)(`+)")
	// [text](target "title") and ![alt](target), once code spans are blanked out.
	linkRE   = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	htmlIDRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	mdLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	tagRE    = regexp.MustCompile(`<[^>]+>`)
)

func parsePage(path, text string) *page {
	p := &page{path: path, lines: strings.Split(text, "\n"), anchors: map[string]bool{}}
	p.fenced = make([]bool, len(p.lines))
	fence := ""
	seen := map[string]int{}
	for i, l := range p.lines {
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			if fence == "" {
				fence = m[1]
				p.fenced[i] = true
				continue
			}
			if m[1][0] == fence[0] && len(m[1]) >= len(fence) {
				fence = ""
				p.fenced[i] = true
				continue
			}
		}
		if fence != "" {
			p.fenced[i] = true
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(l, -1) {
			p.anchors[m[1]] = true
		}
		if m := headingRE.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				p.anchors[s+"-"+strconv.Itoa(n)] = true
			} else {
				p.anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range codeRE.FindAllStringSubmatch(l, -1) {
			if len(m[1]) != len(m[3]) {
				continue
			}
			// In a table, \| stands for | inside a code span too.
			p.spans = append(p.spans, span{line: i + 1, content: strings.TrimSpace(strings.ReplaceAll(m[2], `\|`, "|"))})
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(l, "code"), -1) {
			p.links = append(p.links, link{line: i + 1, target: m[1]})
		}
	}
	return p
}

// slug is the anchor GitHub gives a heading: its text without Markdown, in lower case, every
// character but letters, digits, marks, '_', '-' and spaces dropped, and spaces turned into '-'.
func slug(heading string) string {
	h := codeRE.ReplaceAllString(heading, "$2")
	h = mdLinkRE.ReplaceAllString(h, "$1")
	h = tagRE.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// commandLines returns the text of a page where commands are written: each fenced line (a line
// ending in a backslash joined with the next) and each code span, with the line it starts on.
func (p *page) commandLines() []span {
	var out []span
	for i := 0; i < len(p.lines); i++ {
		if !p.fenced[i] {
			continue
		}
		start, text := i+1, p.lines[i]
		for strings.HasSuffix(strings.TrimSpace(text), `\`) && i+1 < len(p.lines) && p.fenced[i+1] {
			i++
			text = strings.TrimSuffix(strings.TrimSpace(text), `\`) + " " + p.lines[i]
		}
		out = append(out, span{line: start, content: text})
	}
	return append(out, p.spans...)
}
