package render

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template/parse"

	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Charts that generate a Secret (a password, a CA) read it back with Helm's `lookup` by name on every
// upgrade, so that the generated values survive. Once render renamed that Secret, the lookup finds
// nothing and the chart generates new values on every upgrade, or fails it (bitnami's passwords.manage).
// Helm's output does not show a lookup, but it names the template of every document ("# Source:
// grafana/templates/secret.yaml"), so given the chart render reads its templates (Go templates, with the
// standard library's parser) and refuses to rename what a lookup of that kind may read back.

// chartLookups maps each template file, named as Helm names it in "# Source:", to the lookups its
// rendering may call.
type chartLookups map[string][]lookupCall

// lookupCall is one `lookup` a template may reach.
type lookupCall struct {
	// Kind is the looked-up kind when the template spells it out ("Secret"), "" when it is computed.
	Kind string
	// Via is the chain of named templates from the file to the lookup, e.g. [grafana.password].
	Via []string
}

func (c lookupCall) matches(k refs.Kind) bool { return c.Kind == "" || c.Kind == string(k) }

func (c lookupCall) String() string {
	what := "lookup"
	if c.Kind != "" {
		what = fmt.Sprintf("lookup of %ss", c.Kind)
	}
	if len(c.Via) == 0 {
		return what
	}
	return what + " (via " + strings.Join(c.Via, " → ") + ")"
}

// templateFile is one template of a chart or of a subchart.
type templateFile struct {
	source string // as in "# Source:", e.g. grafana/charts/common/templates/_secrets.tpl
	text   string
}

// scanChart reads a chart directory (its templates, and those of its subcharts, unpacked or .tgz)
// and finds, for every template file, the lookups rendering it may call.
func scanChart(dir string) (chartLookups, error) {
	all, err := readChartDir(dir)
	var files []templateFile
	if err == nil {
		files, err = chartTemplates(all, ".", "")
	}
	if err != nil {
		return nil, fmt.Errorf("reading chart %s: %w", dir, err)
	}
	// Named templates are global across a chart and its subcharts, as in Helm.
	trees := map[string]*parse.Tree{}
	var tops []string
	for _, f := range files {
		t := parse.New(f.source)
		t.Mode = parse.SkipFuncCheck
		if _, err := t.Parse(f.text, "{{", "}}", trees); err != nil {
			return nil, fmt.Errorf("reading chart %s: template %s: %w", dir, f.source, err)
		}
		tops = append(tops, f.source)
	}
	calls := map[string][]lookupCall{}
	for name, t := range trees {
		var direct []lookupCall
		var included []string
		walk(t.Root, &direct, &included)
		calls[name] = direct
		for _, r := range included {
			calls[name] = append(calls[name], lookupCall{Via: []string{r}}) // followed by reach
		}
	}
	out := chartLookups{}
	for _, top := range tops {
		if found := reach(top, calls, map[string]bool{}); len(found) > 0 {
			out[top] = found
		}
	}
	return out, nil
}

// reach follows a template's includes to every lookup it may call; the Via of an unresolved include
// entry (a single name, Kind "") is what walk recorded.
func reach(name string, calls map[string][]lookupCall, seen map[string]bool) []lookupCall {
	if seen[name] {
		return nil
	}
	seen[name] = true
	var out []lookupCall
	for _, c := range calls[name] {
		if len(c.Via) == 0 {
			out = append(out, c)
			continue
		}
		callee := c.Via[0]
		for _, found := range reach(callee, calls, seen) {
			out = append(out, lookupCall{Kind: found.Kind, Via: append([]string{callee}, found.Via...)})
		}
	}
	return out
}

// walk collects a tree's direct lookups and the named templates it includes.
func walk(n parse.Node, lookups *[]lookupCall, includes *[]string) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walk(c, lookups, includes)
		}
	case *parse.ActionNode:
		walk(n.Pipe, lookups, includes)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walk(c, lookups, includes)
		}
	case *parse.CommandNode:
		if len(n.Args) > 0 {
			if id, ok := n.Args[0].(*parse.IdentifierNode); ok {
				switch id.Ident {
				case "lookup":
					call := lookupCall{}
					if len(n.Args) > 2 {
						if s, ok := n.Args[2].(*parse.StringNode); ok {
							call.Kind = s.Text
						}
					}
					*lookups = append(*lookups, call)
				case "include", "template":
					if len(n.Args) > 1 {
						if s, ok := n.Args[1].(*parse.StringNode); ok {
							*includes = append(*includes, s.Text)
						}
					}
				}
			}
		}
		for _, a := range n.Args {
			walk(a, lookups, includes)
		}
	case *parse.ChainNode:
		walk(n.Node, lookups, includes)
	case *parse.IfNode:
		walkBranch(&n.BranchNode, lookups, includes)
	case *parse.RangeNode:
		walkBranch(&n.BranchNode, lookups, includes)
	case *parse.WithNode:
		walkBranch(&n.BranchNode, lookups, includes)
	case *parse.TemplateNode:
		*includes = append(*includes, n.Name)
		walk(n.Pipe, lookups, includes)
	}
}

func walkBranch(b *parse.BranchNode, lookups *[]lookupCall, includes *[]string) {
	walk(b.Pipe, lookups, includes)
	walk(b.List, lookups, includes)
	if b.ElseList != nil {
		walk(b.ElseList, lookups, includes)
	}
}

// readChartDir reads what of a chart directory names its templates: Chart.yaml, templates/ and
// charts/, by slash-separated path from the chart's top.
func readChartDir(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		top, _, _ := strings.Cut(rel, "/")
		if d.IsDir() {
			if rel != "." && top != "templates" && top != "charts" {
				return fs.SkipDir
			}
			return nil
		}
		if rel != "Chart.yaml" && top != "templates" && top != "charts" {
			return nil
		}
		b, err := os.ReadFile(p)
		files[rel] = b
		return err
	})
	return files, err
}

// chartTemplates lists the templates of the chart at dir among files (slash paths) and of its
// subcharts, named prefix + the chart's name + their path, as Helm names them in "# Source:".
func chartTemplates(files map[string][]byte, dir, prefix string) ([]templateFile, error) {
	at := func(p string) string { return path.Join(dir, p) }
	var chart struct {
		Name string `json:"name"`
	}
	meta, ok := files[at("Chart.yaml")]
	if !ok {
		return nil, fmt.Errorf("%s: not a chart (no Chart.yaml)", dir)
	}
	if err := yaml.Unmarshal(meta, &chart); err != nil || chart.Name == "" {
		return nil, fmt.Errorf("%s: no chart name in Chart.yaml (%v)", dir, err)
	}
	name := prefix + chart.Name
	var out []templateFile
	subcharts := map[string]bool{}
	for p, b := range files {
		rel, ok := strings.CutPrefix(p, at("templates")+"/")
		if dir == "." {
			rel, ok = strings.CutPrefix(p, "templates/")
		}
		if ok {
			out = append(out, templateFile{source: name + "/templates/" + rel, text: string(b)})
			continue
		}
		sub, ok := strings.CutPrefix(p, at("charts")+"/")
		if dir == "." {
			sub, ok = strings.CutPrefix(p, "charts/")
		}
		if !ok {
			continue
		}
		first, rest, nested := strings.Cut(sub, "/")
		switch {
		case nested && rest == "Chart.yaml":
			subcharts[first] = true
		case !nested && strings.HasSuffix(first, ".tgz"):
			files, err := untar(b)
			if err != nil {
				return nil, fmt.Errorf("subchart %s: %w", first, err)
			}
			top := ""
			for f := range files {
				if d, r, ok := strings.Cut(f, "/"); ok && r == "Chart.yaml" {
					top = d
				}
			}
			if top == "" {
				return nil, fmt.Errorf("subchart %s holds no chart", first)
			}
			more, err := chartTemplates(files, top, name+"/charts/")
			if err != nil {
				return nil, fmt.Errorf("subchart %s: %w", first, err)
			}
			out = append(out, more...)
		}
	}
	for sub := range subcharts {
		more, err := chartTemplates(files, at(path.Join("charts", sub)), name+"/charts/")
		if err != nil {
			return nil, fmt.Errorf("subchart %s: %w", sub, err)
		}
		out = append(out, more...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].source < out[j].source })
	return out, nil
}

// untar reads a packaged chart (.tgz, as `helm dependency build` leaves subcharts).
func untar(b []byte) (map[string][]byte, error) {
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, 16<<20))
		if err != nil {
			return nil, err
		}
		files[path.Clean(h.Name)] = data
	}
}

// helmSourceAnnotation is where Helm 4 names an object's template for its post-renderer: it merges
// the rendered templates into one stream without "# Source:" comments, annotating each object with
// its file (and removes the annotation from the post-renderer's output).
const helmSourceAnnotation = "postrenderer.helm.sh/postrender-filename"

// sourceOf is the template Helm rendered an object from: Helm 4's annotation, else the document's
// "# Source:" comment (Helm 3, helm template); "" if neither.
func sourceOf(o *object) string {
	if s, ok := o.annotations[helmSourceAnnotation].(string); ok && s != "" {
		return filepath.ToSlash(s)
	}
	for _, c := range headComments(o.doc) {
		for _, line := range strings.Split(c, "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(line), "# Source:"); ok {
				return filepath.ToSlash(strings.TrimSpace(s))
			}
		}
	}
	return ""
}

// headComments are the comments above a document's first key, wherever the YAML parser attached them.
func headComments(d *document) []string {
	n := d.root
	var out []string
	for n != nil {
		out = append(out, n.HeadComment)
		if len(n.Content) == 0 {
			break
		}
		n = n.Content[0]
	}
	return out
}

// refuseLookups refuses renaming an object the chart's template for it may read back with lookup,
// unless -allow-lookup names it.
func (p *planner) refuseLookups() error {
	if p.opts.Chart == "" {
		return nil
	}
	lookups, err := scanChart(p.opts.Chart)
	if err != nil {
		return err
	}
	for _, c := range p.optedIn {
		if c.newName == c.name || p.opts.AllowLookup.has(refs.Ref{Kind: c.kind, Name: c.base}) {
			continue
		}
		src := sourceOf(c.object)
		if src == "" {
			p.log.Debug("no '# Source:' comment nor "+helmSourceAnnotation+" annotation: cannot tell its template", "object", c.String(), "document", c.doc.index)
			continue
		}
		for _, call := range lookups[src] {
			if !call.matches(c.kind) {
				continue
			}
			return c.errorf(ErrLookup, "its template %s calls %s: renamed %s, a lookup by its name finds nothing, so every upgrade "+
				"generates new values (or fails). Fix: give the chart every value it would look up (e.g. its password values or an existing "+
				"Secret) and pass -allow-lookup=%s/%s, or leave it out (label it %s: \"false\", or drop it from -select/-all-%ss)",
				src, call, c.newName, strings.ToLower(string(c.kind)), c.base, api.RevisionedLabel, strings.ToLower(string(c.kind)))
		}
	}
	return nil
}
