package render

import (
	"fmt"
	"log/slog"
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// HelmResourcePolicyAnnotation with value "keep" stops `helm upgrade` from deleting the previous
// revision, which pods of the previous ReplicaSet still mount; the garbage collector removes it
// with that ReplicaSet once the controller has attached it.
const (
	HelmResourcePolicyAnnotation = "helm.sh/resource-policy"
	HelmResourcePolicyKeep       = "keep"
)

// change is one value the renderer writes, at a path from the document's top node.
type change struct {
	path  []any
	value any // string or bool
}

// Rename is an opted-in object's new name.
type Rename struct {
	Kind      refs.Kind
	Namespace string // as in the input: empty for Helm's release namespace
	From, To  string
}

// Rewrite is one reference in a pod template pointed at a renamed object.
type Rewrite struct {
	Source    string
	Doc       int
	Path      []any // from the document's top node
	Kind      refs.Kind
	Namespace string // the effective namespace both objects share
	From, To  string
}

// configObject is an opted-in ConfigMap or Secret.
type configObject struct {
	*object
	kind    refs.Kind
	ns      string
	base    string
	newName string
	used    bool
}

type key struct {
	kind     refs.Kind
	ns, name string
}

// planner decides every change before any is made, so that an error leaves the input untouched.
type planner struct {
	opts *Options
	log  *slog.Logger

	optedIn  []*configObject
	targets  map[key]*configObject        // by current name and by original name
	byName   map[refs.Ref][]*configObject // opted-in objects in any namespace, for warnings
	renames  []Rename
	rewrites []Rewrite
}

func newPlanner(opts *Options, log *slog.Logger) *planner {
	return &planner{opts: opts, log: log, targets: map[key]*configObject{}, byName: map[refs.Ref][]*configObject{}}
}

func (p *planner) ns(o *object) string {
	if o.namespace == "" {
		return p.opts.Namespace
	}
	return o.namespace
}

func configKind(o *object) (refs.Kind, bool) {
	if o.apiVersion != "v1" {
		return "", false
	}
	switch refs.Kind(o.kind) {
	case refs.ConfigMap:
		return refs.ConfigMap, true
	case refs.Secret:
		return refs.Secret, true
	}
	return "", false
}

// plan records the changes on each document.
func (p *planner) plan(docs []*document) error {
	var objects []*object
	for _, d := range docs {
		objects = append(objects, d.objects...)
	}
	if err := p.selectConfig(objects); err != nil {
		return err
	}
	if err := p.refuseLookups(); err != nil {
		return err
	}
	for _, o := range objects {
		if err := p.rewriteReferences(o); err != nil {
			return err
		}
	}
	if err := p.refuseMentions(objects); err != nil {
		return err
	}
	for _, c := range p.optedIn {
		if c.newName != c.name && !c.used {
			p.log.Warn("renamed, but no pod template in the input uses it: anything else naming it (another release, an Ingress, a ServiceAccount) still says the old name",
				"object", c.String(), "document", c.doc.index, "source", c.doc.source, "newName", c.newName)
		}
	}
	for _, r := range p.opts.Select.Refs() {
		if len(p.byName[r]) == 0 {
			p.log.Warn("-select names an object that is not in the input (or is labelled \"false\")", "object", r.String())
		}
	}
	return nil
}

// selectConfig finds the opted-in ConfigMaps and Secrets, names their revisions, and refuses inputs
// where two objects would end up with one name.
func (p *planner) selectConfig(objects []*object) error {
	all := map[key]*object{}
	optedIn := map[*object]bool{}
	for _, o := range objects {
		kind, ok := configKind(o)
		if !ok {
			continue
		}
		in, err := p.isOptedIn(o, kind)
		if err != nil {
			return err
		}
		k := key{kind, p.ns(o), o.name}
		if prev, dup := all[k]; dup && o.name != "" && (in || optedIn[prev]) {
			return o.errorf(ErrDuplicate, "%s is also defined in %s document %d; an opted-in object must appear once per namespace", k.String(), prev.doc.source, prev.doc.index)
		} else if !dup && o.name != "" {
			all[k] = o
		}
		if !in {
			continue
		}
		optedIn[o] = true
		c, err := p.revision(o, kind)
		if err != nil {
			return err
		}
		p.optedIn = append(p.optedIn, c)
	}

	bases := map[key]*configObject{}
	for _, c := range p.optedIn {
		k := key{c.kind, c.ns, c.base}
		if prev, dup := bases[k]; dup {
			return c.errorf(ErrDuplicate, "it and %s (document %d) are both revisions of %s; keep one", prev.String(), prev.doc.index, k.String())
		}
		bases[k] = c
	}

	// Output names must stay unique: a revision must not take the name of an object kept as is.
	out := map[key]*object{}
	for k, o := range all {
		if !optedIn[o] {
			out[k] = o
		}
	}
	for _, c := range p.optedIn {
		k := key{c.kind, c.ns, c.newName}
		if prev, dup := out[k]; dup {
			return c.errorf(ErrDuplicate, "its revision name %s is already used by %s (document %d)", c.newName, prev.String(), prev.doc.index)
		}
		out[k] = c.object
	}

	for _, c := range p.optedIn {
		p.targets[key{c.kind, c.ns, c.name}] = c
		p.byName[refs.Ref{Kind: c.kind, Name: c.name}] = append(p.byName[refs.Ref{Kind: c.kind, Name: c.name}], c)
	}
	// References by original name reach the revision, unless another object really has that name.
	for _, c := range p.optedIn {
		k := key{c.kind, c.ns, c.base}
		if _, taken := all[k]; c.base != c.name && !taken {
			p.targets[k] = c
			p.byName[refs.Ref{Kind: c.kind, Name: c.base}] = append(p.byName[refs.Ref{Kind: c.kind, Name: c.base}], c)
		}
	}
	return nil
}

func (k key) String() string {
	if k.ns == "" {
		return fmt.Sprintf("%s %s", k.kind, k.name)
	}
	return fmt.Sprintf("%s %s/%s", k.kind, k.ns, k.name)
}

// isOptedIn reads the label, which wins over flags both ways: "false" keeps an object out of
// -all-configmaps, so a chart can protect an object shared with other releases.
func (p *planner) isOptedIn(o *object, kind refs.Kind) (bool, error) {
	if v, ok := o.labels[api.RevisionedLabel]; ok {
		switch v {
		case api.RevisionedValue:
			return true, nil
		case "false":
			if p.opts.Select.has(refs.Ref{Kind: kind, Name: o.name}) {
				p.log.Warn("selected by -select but labelled \"false\": left as is", "object", o.String(), "document", o.doc.index, "source", o.doc.source)
			}
			return false, nil
		}
		return false, o.errorf(ErrInvalidObject, "label %s must be the string \"true\" or \"false\" (quoted in YAML), not %#v", api.RevisionedLabel, v)
	}
	return p.opts.selects(kind, o.name), nil
}

// revision computes an opted-in object's revision name and the changes that make it one.
func (p *planner) revision(o *object, kind refs.Kind) (*configObject, error) {
	if o.name == "" {
		return nil, o.errorf(ErrInvalidObject, "an opted-in object needs metadata.name: a generated name cannot be referenced by pod templates")
	}
	if msgs := validation.IsDNS1123Subdomain(o.name); len(msgs) > 0 {
		return nil, o.errorf(ErrInvalidObject, "metadata.name %q is not a valid name: %s", o.name, msgs[0])
	}
	hash, err := contentHash(kind, o.raw)
	if err != nil {
		return nil, o.errorf(ErrInvalidObject, "%w", err)
	}
	var rest struct {
		Type      string `json:"type"`
		Immutable *bool  `json:"immutable"`
	}
	if err := utiljson.Unmarshal(o.raw, &rest); err != nil {
		return nil, o.errorf(ErrInvalidObject, "reading type and immutable: %w", err)
	}
	for _, a := range []string{api.OriginalNameAnnotation, HelmResourcePolicyAnnotation} {
		if v, ok := o.annotations[a]; ok {
			if _, isString := v.(string); !isString {
				return nil, o.errorf(ErrInvalidObject, "annotation %s must be a string (quoted in YAML), not %#v", a, v)
			}
		}
	}
	c := &configObject{object: o, kind: kind, ns: p.ns(o), base: o.name}
	// Our own earlier output: keep its original name, so a re-render names it exactly as before (and a
	// render of edited output names the new content after the same original).
	if orig, _ := o.annotations[api.OriginalNameAnnotation].(string); orig != "" && content.IsRevisionOf(o.name, orig) &&
		len(validation.IsDNS1123Subdomain(orig)) == 0 {
		c.base = orig
	}
	c.newName = content.Name(c.base, hash)

	add := func(value any, path ...any) {
		o.doc.changes = append(o.doc.changes, change{path: append(append([]any{}, o.path...), path...), value: value})
	}
	if c.newName != o.name {
		add(c.newName, "metadata", "name")
		p.renames = append(p.renames, Rename{Kind: kind, Namespace: o.namespace, From: o.name, To: c.newName})
		p.log.Debug("renaming", "object", o.String(), "to", c.newName, "document", o.doc.index, "source", o.doc.source)
	}
	if o.labels[api.RevisionedLabel] != api.RevisionedValue {
		add(api.RevisionedValue, "metadata", "labels", api.RevisionedLabel)
	}
	if o.annotations[api.OriginalNameAnnotation] != c.base {
		add(c.base, "metadata", "annotations", api.OriginalNameAnnotation)
	}
	if o.annotations[HelmResourcePolicyAnnotation] != HelmResourcePolicyKeep {
		add(HelmResourcePolicyKeep, "metadata", "annotations", HelmResourcePolicyAnnotation)
	}
	if rest.Immutable == nil || !*rest.Immutable {
		add(true, "immutable")
	}
	return c, nil
}

// rewriteReferences points every reference o makes to an opted-in object at its revision, or refuses
// when o is no revision's pod template and the object is renamed (an Ingress would keep naming the
// object that is gone). refs.ManifestUses, the one reference table, says where references are; this
// only maps its paths onto the YAML.
func (p *planner) rewriteReferences(o *object) error {
	uses, err := refs.ManifestUses(o.apiVersion, o.kind, o.raw)
	if err != nil {
		return o.errorf(ErrInvalidObject, "%w", err)
	}
	own := p.ns(o)
	warned := map[refs.Ref]bool{}
	for _, u := range uses {
		ns := own
		if u.Namespace != "" {
			ns = u.Namespace
		}
		c := p.targets[key{u.Kind, ns, u.Name}]
		if c == nil {
			if err := p.unresolved(o, ns, u); err != nil {
				return err
			}
			if !warned[u.Ref] {
				warned[u.Ref] = true
				p.warnUnresolved(o, ns, u.Ref)
			}
			continue
		}
		c.used = true
		if c.newName == u.Name {
			continue
		}
		if u.Outside {
			return o.errorf(ErrUnreferencedRename, "%s names %s, which is opted in and renamed %s; a %s follows no revision and would keep "+
				"naming an object that is gone. Fix: leave %s out (label it %s: \"false\", or drop it from -select/-all-%ss)",
				pathString(u.Path), c.String(), c.newName, o.kind, u.Name, api.RevisionedLabel, strings.ToLower(string(u.Kind)))
		}
		path := append(append([]any{}, o.path...), u.Path...)
		o.doc.changes = append(o.doc.changes, change{path: path, value: c.newName})
		p.rewrites = append(p.rewrites, Rewrite{Source: o.doc.source, Doc: o.doc.index, Path: path, Kind: u.Kind, Namespace: ns, From: u.Name, To: c.newName})
		if ev := preHookEvent(o); ev != "" && preHookEvent(c.object) == "" && !warned[u.Ref] {
			warned[u.Ref] = true
			p.log.Warn("a "+ev+" hook reads a renamed revision, which Helm creates only after that hook: on a first install, or an "+
				"upgrade that changes the config, the hook's pod cannot start until the hook times out. Make the config a hook too "+
				"(a lower helm.sh/hook-weight) or leave it out", "hook", o.String(), "object", c.String(), "newName", c.newName,
				"document", o.doc.index, "source", o.doc.source)
		}
	}
	return nil
}

// preHookEvent is the first Helm hook event of o that runs before Helm applies the release's objects
// (pre-install, pre-upgrade, pre-rollback), "" if none. Helm 4 passes hooks to its post-renderer
// with the other objects, so render rewrites their references too; Helm 3 never passes hooks.
func preHookEvent(o *object) string {
	hooks, _ := o.annotations["helm.sh/hook"].(string)
	for ev := range strings.SplitSeq(hooks, ",") {
		switch ev = strings.TrimSpace(ev); ev {
		case "pre-install", "pre-upgrade", "pre-rollback":
			return ev
		}
	}
	return ""
}

// refuseMentions refuses renaming an object whose name a string field of the same namespace carries:
// the renderer cannot rewrite inside strings (see mentions).
func (p *planner) refuseMentions(objects []*object) error {
	renamed := map[string]map[string]*configObject{} // namespace -> old name -> object
	for _, c := range p.optedIn {
		if c.newName == c.name {
			continue
		}
		if renamed[c.ns] == nil {
			renamed[c.ns] = map[string]*configObject{}
		}
		renamed[c.ns][c.name] = c
	}
	for _, o := range objects {
		byName := renamed[p.ns(o)]
		if len(byName) == 0 {
			continue
		}
		names := map[string]bool{}
		for n := range byName {
			if c := byName[n]; c.object != o {
				names[n] = true
			}
		}
		for _, m := range mentions(o, names) {
			c := byName[m.name]
			return o.errorf(ErrUnreferencedRename, "%s names %s inside a string, which the renderer cannot rewrite; renamed %s, it "+
				"would keep naming an object that is gone. Fix: leave %s out (label it %s: \"false\"), or pass it through a volume, "+
				"envFrom or env valueFrom", pathString(m.path), c.String(), c.newName, c.name, api.RevisionedLabel)
		}
	}
	return nil
}

// unresolved refuses a reference that names an opted-in object only across an unknown namespace: a
// manifest without metadata.namespace is in the namespace Helm installs into, which the renderer is
// told by -namespace alone. Renaming the object and leaving the reference would break the next pod.
func (p *planner) unresolved(o *object, ns string, u refs.Use) error {
	for _, c := range p.byName[u.Ref] {
		if (ns == "") != (c.ns == "") && c.newName != u.Name {
			where := func(n string) string {
				if n == "" {
					return "the release's namespace (none given)"
				}
				return fmt.Sprintf("namespace %q", n)
			}
			fix := c.ns
			if fix == "" {
				fix = ns
			}
			return o.errorf(ErrUnreferencedRename, "%s names %s %s in %s, but the opted-in %s is in %s and would be renamed %s. "+
				"Fix: pass -namespace=%s (Helm: --post-renderer-args -namespace=%s), or give both the same metadata.namespace",
				pathString(u.Path), u.Kind, u.Name, where(ns), c.String(), where(c.ns), c.newName, fix, fix)
		}
	}
	return nil
}

// warnUnresolved explains a reference that looks meant for a revision but is left alone.
func (p *planner) warnUnresolved(o *object, ns string, r refs.Ref) {
	attrs := []any{"workload", o.String(), "reference", r.String(), "document", o.doc.index, "source", o.doc.source}
	if others := p.byName[r]; len(others) > 0 {
		p.log.Warn(fmt.Sprintf("reference left as is: the opted-in %s is in namespace %q and this workload in %q; pods cannot use config from another namespace (Helm output without namespaces: pass -namespace)",
			others[0].String(), others[0].ns, ns), attrs...)
		return
	}
	if p.opts.Select.has(r) {
		p.log.Warn("reference left as is: selected by -select but not in the input in the workload's namespace", attrs...)
	}
}
