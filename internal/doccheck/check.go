// Package doccheck keeps the user docs true to the code: every relative link and anchor resolves,
// every flag and chart value they name exists (the flags from the binary's own flag sets, the values
// from the charts' values.schema.json), they carry no commit hash nor "run N"/"issue N" prose, the
// README fits a screen, and the generated pages (the flag reference, the charts' READMEs) are current.
// `make test-docs` runs it (hack/docs); it needs no network.
package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/internal/cli"
)

// Problem is one finding, at a line of a file.
type Problem struct {
	Path string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.Path, p.Line, p.Msg) }

// Inputs are what the docs are checked against.
type Inputs struct {
	// Root is the repository.
	Root string
	// Commands are the binary's commands and flags (cli.Reference).
	Commands []cli.CommandReference
	// ChartREADMEs renders a chart's README from its values.yaml (helm-docs), given the chart's
	// directory; nil leaves the charts' READMEs unchecked.
	ChartREADMEs func(chartDir string) (string, error)
}

// ReadmeMaxLines is how long README.md may be: one screen, the rest is in docs/.
const ReadmeMaxLines = 120

// ReferencePath is the generated flag reference.
const ReferencePath = "docs/reference.md"

// Check returns every problem of the docs under in.Root, sorted by file and line.
func Check(in Inputs) ([]Problem, error) {
	files, err := docFiles(in.Root)
	if err != nil {
		return nil, err
	}
	values, err := loadValues(in.Root)
	if err != nil {
		return nil, err
	}
	c := checker{in: in, values: values, pages: map[string]*page{}, flags: flagSets(in.Commands)}
	var out []Problem
	for _, f := range files {
		p, err := c.page(f)
		if err != nil {
			return nil, err
		}
		out = append(out, c.links(p)...)
		out = append(out, c.flagNames(p)...)
		out = append(out, c.valueNames(p)...)
		if !strings.HasPrefix(f, "docs/benchmarks/") {
			out = append(out, prose(p)...)
		}
	}
	if p, ok := c.pages["README.md"]; ok && len(p.lines) > ReadmeMaxLines+1 {
		out = append(out, Problem{"README.md", ReadmeMaxLines + 1, fmt.Sprintf("README.md has %d lines; it must fit one screen (%d at most): move the rest to docs/", len(p.lines)-1, ReadmeMaxLines)})
	}
	rb, err := c.runbooks()
	if err != nil {
		return nil, err
	}
	out = append(out, rb...)
	gen, err := generated(in)
	if err != nil {
		return nil, err
	}
	out = append(out, gen...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Line < out[j].Line
	})
	return out, nil
}

// docFiles are the pages users read: README.md, CONTRIBUTING.md, RELEASING.md, CHANGELOG.md, every
// Markdown file under docs/ and each chart's README.md.
func docFiles(root string) ([]string, error) {
	var files []string
	for _, f := range []string{"README.md", "CONTRIBUTING.md", "RELEASING.md", "CHANGELOG.md"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			files = append(files, f)
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	charts, err := filepath.Glob(filepath.Join(root, "charts", "*", "README.md"))
	if err != nil {
		return nil, err
	}
	for _, c := range charts {
		rel, _ := filepath.Rel(root, c)
		files = append(files, filepath.ToSlash(rel))
	}
	return files, nil
}

type checker struct {
	in     Inputs
	values *values
	pages  map[string]*page
	// flags holds each command's flag names; "" holds every command's.
	flags map[string]map[string]bool
}

func (c *checker) page(rel string) (*page, error) {
	if p, ok := c.pages[rel]; ok {
		return p, nil
	}
	b, err := os.ReadFile(filepath.Join(c.in.Root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	p := parsePage(rel, string(b))
	c.pages[rel] = p
	return p, nil
}

// links: every relative link names a file or directory of the repository, and its anchor, in a
// Markdown file, a heading or an <a id> of that file.
func (c *checker) links(p *page) []Problem {
	var out []Problem
	for _, l := range p.links {
		t := l.target
		if strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
			continue
		}
		file, anchor, _ := strings.Cut(t, "#")
		target := p.path
		if file != "" {
			target = path.Clean(path.Join(path.Dir(p.path), file))
			if strings.HasPrefix(target, "../") {
				out = append(out, Problem{p.path, l.line, fmt.Sprintf("link %q leaves the repository", t)})
				continue
			}
			if _, err := os.Stat(filepath.Join(c.in.Root, filepath.FromSlash(target))); err != nil {
				out = append(out, Problem{p.path, l.line, fmt.Sprintf("link %q: %s does not exist", t, target)})
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(target, ".md") {
			continue
		}
		tp, err := c.page(target)
		if err != nil {
			out = append(out, Problem{p.path, l.line, fmt.Sprintf("link %q: %v", t, err)})
			continue
		}
		if !tp.anchors[anchor] {
			out = append(out, Problem{p.path, l.line, fmt.Sprintf("link %q: %s has no heading with the anchor #%s", t, target, anchor)})
		}
	}
	return out
}

// RunbooksPath is the operator's manual, where every alert of the charts has its runbook.
const RunbooksPath = "docs/operations.md"

// runbookRE finds an alert's runbook anchor in a chart template: runbook_url: <base>#anchor.
var runbookRE = regexp.MustCompile(`runbook_url:.*#([A-Za-z0-9_-]+)`)

// runbooks: every alert a chart renders links its runbook in the operator's manual, and that
// heading exists. An alert is read in the middle of an incident: a dead link there costs most.
func (c *checker) runbooks() ([]Problem, error) {
	templates, err := filepath.Glob(filepath.Join(c.in.Root, "charts", "*", "templates", "*.yaml"))
	if err != nil || len(templates) == 0 {
		return nil, err
	}
	var out []Problem
	var manual *page
	for _, f := range templates {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(c.in.Root, f)
		for i, line := range strings.Split(string(b), "\n") {
			m := runbookRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if manual == nil {
				if manual, err = c.page(RunbooksPath); err != nil {
					return nil, fmt.Errorf("%s names runbooks: %w", rel, err)
				}
			}
			if !manual.anchors[m[1]] {
				out = append(out, Problem{filepath.ToSlash(rel), i + 1, fmt.Sprintf("runbook #%s: %s has no heading with that anchor; write the alert's runbook there", m[1], RunbooksPath)})
			}
		}
	}
	return out, nil
}

func flagSets(cmds []cli.CommandReference) map[string]map[string]bool {
	sets := map[string]map[string]bool{"": {"h": true, "help": true}}
	for _, c := range cmds {
		s := map[string]bool{"h": true, "help": true}
		for _, f := range c.Flags {
			s[f.Name] = true
			sets[""][f.Name] = true
		}
		sets[c.Name] = s
	}
	return sets
}

var (
	// A flag written alone in a code span: `-name`, `-name=value`, `-name VALUE`.
	loneFlagRE = regexp.MustCompile(`^-([A-Za-z][A-Za-z0-9-]*)(?:[= ]|$)`)
	flagTokRE  = regexp.MustCompile(`^--?([A-Za-z][A-Za-z0-9-]*)(?:=|$)`)
	// What may stand before a command in a shell line.
	cmdStarts = map[string]bool{"|": true, "&&": true, "||": true, ";": true, "$": true, "#": true, "(": true, "$(": true,
		"then": true, "do": true, "time": true, "exec": true, "xargs": true, "sudo": true, "env": true}
	envAssignRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
	cmdEnds     = map[string]bool{"|": true, "&&": true, "||": true, ";": true, ")": true, "#": true, ">": true, "2>": true, "<": true}
)

// flagNames: a flag written alone in a code span (`-name`) is a flag of some command of ours; in a
// command line of ours (`configmap-attacher CMD ...`, `kubectl configmap-revisions CMD ...`, and
// Helm's `--post-renderer-args`, which go to render) every flag is one of that command's.
func (c *checker) flagNames(p *page) []Problem {
	var out []Problem
	for _, s := range p.spans {
		if m := loneFlagRE.FindStringSubmatch(s.content); m != nil && !c.flags[""][m[1]] {
			out = append(out, Problem{p.path, s.line, fmt.Sprintf("`%s`: no command of configmap-attacher has a flag -%s (docs/reference.md lists them)", s.content, m[1])})
		}
	}
	for _, s := range p.commandLines() {
		for _, inv := range invocations(s.content) {
			set := c.flags[inv.command]
			for _, f := range inv.flags {
				if !set[f] {
					out = append(out, Problem{p.path, s.line, fmt.Sprintf("configmap-attacher %s has no flag -%s (docs/reference.md lists its flags)", inv.command, f)})
				}
			}
		}
	}
	return out
}

type invocation struct {
	command string
	flags   []string
}

var commandNames = map[string]bool{"attach": true, "controller": true, "render": true, "adopt": true, "release": true,
	"history": true, "diff": true, "version": true, "help": true}

// invocations finds the commands of ours a shell line runs and the flags it gives them.
func invocations(line string) []invocation {
	toks := strings.Fields(line)
	var out []invocation
	for i := 0; i < len(toks); i++ {
		t := strings.Trim(toks[i], `"'`)
		if arg, ok := strings.CutPrefix(t, "--post-renderer-args"); ok {
			v := strings.TrimPrefix(arg, "=")
			if v == "" && i+1 < len(toks) {
				v = toks[i+1]
			}
			if m := flagTokRE.FindStringSubmatch(strings.Trim(v, `"'`)); m != nil {
				out = append(out, invocation{command: "render", flags: []string{m[1]}})
			}
			continue
		}
		atStart := i == 0 || cmdStarts[toks[i-1]] || envAssignRE.MatchString(toks[i-1])
		var next int
		switch {
		case atStart && path.Base(t) == "configmap-attacher":
			next = i + 1
		case atStart && t == "kubectl" && i+1 < len(toks) && toks[i+1] == "configmap-revisions":
			next = i + 2
		default:
			continue
		}
		if next >= len(toks) {
			continue
		}
		inv := invocation{command: "attach"}
		switch first := toks[next]; {
		case commandNames[first]:
			inv.command = first
			next++
		case strings.HasPrefix(first, "-"):
		default:
			continue // a release or file name, not a command
		}
		for j := next; j < len(toks) && !cmdEnds[toks[j]]; j++ {
			if m := flagTokRE.FindStringSubmatch(strings.Trim(toks[j], `"'`)); m != nil && !slices.Contains(inv.flags, m[1]) {
				inv.flags = append(inv.flags, m[1])
			}
			i = j
		}
		out = append(out, inv)
	}
	return out
}

var (
	// --set a.b=1,c=2 / --set-string / --set-json 'a={...}', the value quoted or not.
	setRE = regexp.MustCompile(`--set(?:-string|-json|-file|-literal)?[= ]+['"]?([^'"\s]+)`)
	// A value path written alone in a code span: `a.b`, `a.b=value`, `a=value`.
	valueSpanRE = regexp.MustCompile(`^([a-z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+|\[[0-9]+\])*)(=\S*)?$`)
	keyRE       = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+|\[[0-9]+\])*$`)
)

// valueNames: every chart value a page names exists in a chart's values.schema.json: those set
// with --set (and its kin) anywhere, and those written alone in a code span (`a.b`, `a.b=value`,
// `a=value`) whose first key is a chart's.
func (c *checker) valueNames(p *page) []Problem {
	var out []Problem
	bad := func(line int, key string) {
		out = append(out, Problem{p.path, line, fmt.Sprintf("chart value %s exists in no chart's values.schema.json", key)})
	}
	for _, s := range p.commandLines() {
		for _, m := range setRE.FindAllStringSubmatch(s.content, -1) {
			for _, key := range setKeys(m[1]) {
				if !c.values.exists(key) {
					bad(s.line, key)
				}
			}
		}
	}
	for _, s := range p.spans {
		m := valueSpanRE.FindStringSubmatch(s.content)
		if m == nil {
			continue
		}
		key := m[1]
		if m[2] == "" && !strings.Contains(key, ".") {
			continue // a bare word
		}
		if c.values.topLevel(key) && !c.values.exists(key) {
			bad(s.line, key)
		}
	}
	return out
}

// setKeys splits --set's argument into its keys: pairs are separated by commas outside braces, and
// a part without "key=" continues the previous value (a list).
func setKeys(arg string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range arg {
		switch r {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, arg[start:i])
				start = i + 1
			}
		}
	}
	parts = append(parts, arg[start:])
	var keys []string
	for _, part := range parts {
		if key, _, ok := strings.Cut(part, "="); ok && keyRE.MatchString(key) {
			keys = append(keys, key)
		}
	}
	return keys
}

var (
	// A commit: 7 to 40 hex digits with a letter and a digit, standing alone (not part of a name
	// like app-config-5d8f9c7b6a, a path, a digest or a version).
	hashRE   = regexp.MustCompile(`(?:^|[^0-9A-Za-z_./:@+-])([0-9a-f]{7,40})(?:$|[^0-9A-Za-z_/:@+-])`)
	letterRE = regexp.MustCompile(`[a-f]`)
	digitRE  = regexp.MustCompile(`[0-9]`)
	// What names a hash that is not a commit: sha256 3f2a1b0c.
	digestWordRE = regexp.MustCompile(`(?i)(sha256|sha1|hash|digest)\W*$`)
	// "issue 20", "run 5", "run #5", but not "run 2 replicas".
	numberedRE = regexp.MustCompile(`(?i)\b(?:issues?|runs?|PR)\s+#?[0-9]+\b(\s*[A-Za-z]?)`)
	ordinalRE  = regexp.MustCompile(`(?i)\b(?:third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|[0-9]+(?:st|nd|rd|th))\s+run\b`)
)

// contentHashLen is the length of our content hashes (<name>-<hash>, config-hash): they are not commits.
const contentHashLen = 10

// prose: the docs describe the product as it is; the history of its making (commits, runs, issues)
// belongs to git and CI.
func prose(p *page) []Problem {
	var out []Problem
	for i, l := range p.lines {
		for _, m := range hashRE.FindAllStringSubmatchIndex(l, -1) {
			h := l[m[2]:m[3]]
			if len(h) == contentHashLen || !letterRE.MatchString(h) || !digitRE.MatchString(h) || digestWordRE.MatchString(l[:m[2]]) {
				continue
			}
			out = append(out, Problem{p.path, i + 1, fmt.Sprintf("%q looks like a commit: the docs say what is, git keeps how it came", h)})
		}
		for _, m := range numberedRE.FindAllStringSubmatch(l, -1) {
			if !strings.HasPrefix(strings.ToLower(m[0]), "issue") && strings.TrimSpace(m[1]) != "" {
				continue // "runs 2 replicas": a count, not a run
			}
			out = append(out, Problem{p.path, i + 1, fmt.Sprintf("%q: no run or issue history in the docs (CI and the tracker keep it)", strings.TrimSpace(strings.TrimSuffix(m[0], m[1])))})
		}
		for _, m := range ordinalRE.FindAllString(l, -1) {
			out = append(out, Problem{p.path, i + 1, fmt.Sprintf("%q: no run or issue history in the docs (CI and the tracker keep it)", m)})
		}
	}
	return out
}

// generated: the flag reference and the charts' READMEs are what their generators make now.
func generated(in Inputs) ([]Problem, error) {
	var out []Problem
	want := Reference(in.Commands)
	got, err := os.ReadFile(filepath.Join(in.Root, ReferencePath))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if string(got) != want {
		out = append(out, Problem{ReferencePath, 1, "stale: regenerate it with `make docs`"})
	}
	if in.ChartREADMEs == nil {
		return out, nil
	}
	charts, err := filepath.Glob(filepath.Join(in.Root, "charts", "*", "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	for _, c := range charts {
		dir := filepath.Dir(c)
		rel, _ := filepath.Rel(in.Root, dir)
		rel = filepath.ToSlash(rel)
		want, err := in.ChartREADMEs(dir)
		if err != nil {
			// A value without a description, a template that does not render: the chart's to fix.
			out = append(out, Problem{rel + "/values.yaml", 1, fmt.Sprintf("its README cannot be generated: %v", err)})
			continue
		}
		for _, key := range undescribed(want) {
			out = append(out, Problem{rel + "/values.yaml", 1, fmt.Sprintf("value %s has no description: give it a \"# --\" comment", key)})
		}
		got, err := os.ReadFile(filepath.Join(dir, "README.md"))
		switch {
		case os.IsNotExist(err):
			out = append(out, Problem{rel + "/README.md", 1, "missing: generate the charts' READMEs from values.yaml with `make docs`"})
		case err != nil:
			return nil, err
		case string(got) != want:
			out = append(out, Problem{rel + "/README.md", 1, "stale: regenerate the charts' READMEs from values.yaml with `make docs`"})
		}
	}
	return out, nil
}

// undescribed lists the values of a generated chart README whose row has no description: helm-docs
// lists every value of values.yaml, and one without a "# --" comment gets an empty last cell.
func undescribed(readme string) []string {
	var keys []string
	inTable := false
	for _, l := range strings.Split(readme, "\n") {
		switch {
		case strings.HasPrefix(l, "| Key | Type | Default | Description |"):
			inTable = true
		case !strings.HasPrefix(l, "|"):
			inTable = false
		case inTable && strings.HasSuffix(l, "|  |"):
			key, _, _ := strings.Cut(strings.TrimPrefix(l, "| "), " |")
			keys = append(keys, key)
		}
	}
	return keys
}
