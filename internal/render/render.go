// Package render gives opted-in ConfigMaps and Secrets content-hash names in a set of manifests and
// points the pod templates that use them at those names, so that a new config revision is a new
// object and the previous ReplicaSet keeps mounting the previous one. It is the `render` command: a
// Helm post-renderer and a filter in kubectl pipelines.
//
// Everything it does not rename is written back as it was read (key order, quoting, most comments),
// and before writing anything it re-reads its own output the way kubectl does and checks that it means
// exactly the input plus the intended changes.
package render

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	yaml "go.yaml.in/yaml/v3"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
)

// Run renders the inputs named by opts.Files (or in) to out. On error nothing is written to out, so a
// pipeline never applies half a release.
func Run(ctx context.Context, opts *Options, in io.Reader, out io.Writer) error {
	docs, err := readInputs(opts, in)
	if err != nil {
		return err
	}
	res, err := render(ctx, opts, docs)
	if err != nil {
		return err
	}
	if _, err := out.Write(res.out); err != nil {
		return fmt.Errorf("writing the rendered manifests: %w", err)
	}
	return nil
}

func readInputs(opts *Options, in io.Reader) ([]*document, error) {
	files := opts.Files
	if len(files) == 0 {
		files = []string{"-"}
	}
	var docs []*document
	for _, f := range files {
		var d []*document
		var err error
		if f == "-" {
			d, err = parseStream("stdin", in)
		} else {
			d, err = parseFile(f)
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

func parseFile(name string) ([]*document, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	defer f.Close()
	return parseStream(name, f)
}

// result is a rendering and what it changed, for logs and tests.
type result struct {
	out      []byte
	docs     []*document
	renames  []Rename
	rewrites []Rewrite
}

func render(ctx context.Context, opts *Options, docs []*document) (*result, error) {
	log := logging.FromContext(ctx)
	p := newPlanner(opts, log)
	if err := p.plan(docs); err != nil {
		return nil, err
	}
	for _, d := range docs {
		if err := d.apply(); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	for _, d := range docs {
		if err := d.encode(&buf); err != nil {
			return nil, err
		}
	}
	if err := verify(buf.Bytes(), docs); err != nil {
		return nil, err
	}
	log.Info("rendered", "documents", len(docs), "renamed", len(p.renames), "referencesRewritten", len(p.rewrites))
	return &result{out: buf.Bytes(), docs: docs, renames: p.renames, rewrites: p.rewrites}, nil
}

// outputIndent is the indentation of everything the renderer writes, as Helm writes its output.
const outputIndent = 2

// encode writes the document after an explicit "---", as Helm does: without it, a document holding
// only a comment (an empty template's "# Source:" line) would merge into the next one when read back.
func (d *document) encode(w *bytes.Buffer) error {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(outputIndent)
	err := enc.Encode(d.root)
	if err == nil {
		err = enc.Close()
	}
	if err != nil {
		return &DocError{Source: d.source, Doc: d.index, Err: fmt.Errorf("%w: writing YAML: %w", ErrUnsafe, err)}
	}
	w.WriteString("---\n")
	// An empty document's comments come out after blank lines that would grow the output for nothing.
	w.Write(bytes.TrimLeft(buf.Bytes(), "\n"))
	return nil
}

// apply makes the planned changes to the document's node tree. A document that uses anchors or merge
// keys is expanded first, and only if the expansion reads back identically.
func (d *document) apply() error {
	if len(d.changes) == 0 {
		return nil
	}
	top := d.top()
	if needsExpansion(top) {
		budget := maxExpandedNodes
		e, err := expand(top, &budget)
		if err != nil {
			return d.errorf(top.Line, ErrUnsafe, "expanding YAML anchors: %w", err)
		}
		root := *d.root
		root.Content = []*yaml.Node{e}
		j, err := jsonOf(&root)
		if err != nil || !jsonEqual(j, d.json) {
			return d.errorf(top.Line, ErrUnsafe, "it uses YAML anchors or merge keys (<<) in a way the renderer cannot expand without changing its meaning; write the values out instead")
		}
		d.root = &root
		top = e
	}
	for _, c := range d.changes {
		if err := set(top, c.path, c.value); err != nil {
			return d.errorf(top.Line, ErrUnsafe, "writing %s: %w", pathString(c.path), err)
		}
	}
	return nil
}
