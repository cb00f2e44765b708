package render

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Options are the render command's flags. The zero value renames only labelled objects in the input
// read from the reader Run is given.
type Options struct {
	// Files are read in order as one set of manifests, like repeated kubectl -f; "-" is the reader
	// Run is given. Empty means that reader alone.
	Files []string
	// Namespace is what an object without metadata.namespace lives in: Helm output usually has none,
	// and the release namespace is only known to whoever runs Helm.
	Namespace     string
	Select        Selection
	AllConfigMaps bool
	AllSecrets    bool
	// Chart is the directory of the chart whose output is rendered: its templates tell which objects
	// the chart reads back with lookup (lookup.go). Empty: not checked.
	Chart string
	// AllowLookup are objects to rename although their template may look them up: the user gives
	// every value the lookup would have kept.
	AllowLookup Selection
}

// NewOptions returns options with defaults.
func NewOptions() *Options { return &Options{} }

// AddFlags registers the render flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of objects that have no metadata.namespace (Helm's release namespace); without it they only match each other")
	fs.Var(&o.Select, "select", "comma-separated kind/name of extra objects to revision although unlabelled, e.g. configmap/app-config,secret/app-env (kinds: configmap, cm, secret)")
	fs.BoolVar(&o.AllConfigMaps, "all-configmaps", o.AllConfigMaps, "revision every ConfigMap in the input except those labelled "+api.RevisionedLabel+`: "false"`)
	fs.StringVar(&o.Chart, "chart", o.Chart, "directory of the chart being rendered (Helm's chart path; the Argo CD plugin passes .): refuse to rename a ConfigMap or Secret its template reads back with lookup")
	fs.Var(&o.AllowLookup, "allow-lookup", "comma-separated kind/name to rename although -chart finds a lookup in its template: every value the lookup would keep is given explicitly")
	fs.BoolVar(&o.AllSecrets, "all-secrets", o.AllSecrets, "revision every Secret in the input except those labelled "+api.RevisionedLabel+`: "false"`)
}

// Validate checks the flags alone, before any input is read.
func (o *Options) Validate() error {
	var errs []string
	if o.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(o.Namespace) {
			errs = append(errs, fmt.Sprintf("-namespace %q is not a valid namespace: %s", o.Namespace, msg))
		}
	}
	errs = append(errs, o.Select.problems()...)
	errs = append(errs, o.AllowLookup.problems()...)
	for _, f := range o.Files {
		// The flag package stops at the first file, so a flag after it arrives here as a file name.
		if f != "-" && strings.HasPrefix(f, "-") {
			errs = append(errs, fmt.Sprintf("%q looks like a flag after a file name: put flags before files", f))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// selects reports whether the flags opt in an unlabelled object.
func (o *Options) selects(kind refs.Kind, name string) bool {
	switch {
	case kind == refs.ConfigMap && o.AllConfigMaps, kind == refs.Secret && o.AllSecrets:
		return true
	}
	return o.Select.has(refs.Ref{Kind: kind, Name: name})
}

// Selection is the -select flag: config objects named by kind and name, in whatever namespace.
type Selection struct {
	raw   []string
	refs  []refs.Ref
	probs []string
}

func (s *Selection) String() string { return strings.Join(s.raw, ",") }

// Set accepts the flag more than once, so a Helm user can pass one --post-renderer-args per object.
func (s *Selection) Set(v string) error {
	s.raw = append(s.raw, v)
	for i, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		kind, name, ok := strings.Cut(item, "/")
		if !ok || name == "" {
			s.probs = append(s.probs, fmt.Sprintf("-select %q: entry %d %q is not kind/name (e.g. configmap/app-config)", v, i+1, item))
			continue
		}
		k, err := parseKind(kind)
		if err != nil {
			s.probs = append(s.probs, fmt.Sprintf("-select %q: entry %d: %v", v, i+1, err))
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			s.probs = append(s.probs, fmt.Sprintf("-select %q: %q is not a valid name: %s", v, name, msg))
		}
		s.refs = append(s.refs, refs.Ref{Kind: k, Name: name})
	}
	return nil
}

// Refs returns the selected objects in the order given.
func (s *Selection) Refs() []refs.Ref { return s.refs }

func (s *Selection) has(r refs.Ref) bool {
	for _, x := range s.refs {
		if x == r {
			return true
		}
	}
	return false
}

func (s *Selection) problems() []string { return s.probs }

func parseKind(s string) (refs.Kind, error) {
	switch strings.ToLower(s) {
	case "configmap", "configmaps", "cm":
		return refs.ConfigMap, nil
	case "secret", "secrets":
		return refs.Secret, nil
	}
	return "", fmt.Errorf("kind %q is neither configmap nor secret", s)
}
