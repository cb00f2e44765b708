// Package refs is the one table of where Kubernetes objects name ConfigMaps and Secrets: in a pod spec
// (Uses), and anywhere in a manifest (ManifestUses: the pod templates of every workload kind, Argo
// Rollouts' analysis and experiment templates, and users that are no pod at all, like an Ingress's TLS
// Secret). The controller attaches and protects, the webhook pins, history lists and the renderer
// rewrites from this table alone.
package refs

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is the kind of a config object a pod spec can reference.
type Kind string

const (
	ConfigMap Kind = "ConfigMap"
	Secret    Kind = "Secret"
)

// Kinds returns the config kinds, in the order output lists them.
func Kinds() []Kind { return []Kind{ConfigMap, Secret} }

// Resource is the lower-case plural used by the API and RBAC.
func (k Kind) Resource() string {
	switch k {
	case ConfigMap:
		return "configmaps"
	case Secret:
		return "secrets"
	}
	return strings.ToLower(string(k)) + "s"
}

// GVR is the API resource of a config kind: the one place it is spelled out.
func (k Kind) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Version: "v1", Resource: k.Resource()}
}

// Ref names a config object in the pod's own namespace (pod specs cannot reach across namespaces).
type Ref struct {
	Kind Kind
	Name string
}

func (r Ref) String() string { return fmt.Sprintf("%s/%s", r.Kind, r.Name) }

// Path locates a name field inside a PodSpec, as JSON field names and list indexes, e.g.
// ["volumes", 0, "projected", "sources", 1, "configMap", "name"].
type Path []any

// In returns the value at the path in decoded JSON (maps and slices as encoding/json makes them), nil
// when it is absent.
func (p Path) In(v any) any {
	for _, e := range p {
		switch k := e.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k < 0 || k >= len(s) {
				return nil
			}
			v = s[k]
		default:
			return nil
		}
	}
	return v
}

// InVolumesOrEnv reports whether a path from a pod spec lies in its volumes or in a container's env
// or envFrom: where a pod reads config, and all the pinning webhook rewrites (imagePullSecrets are
// the kubelet's registry credentials, which must stay current).
func (p Path) InVolumesOrEnv() bool {
	switch {
	case len(p) >= 3 && p[0] == "volumes":
		return true
	case len(p) >= 4 && (p[0] == "containers" || p[0] == "initContainers"):
		return p[2] == "env" || p[2] == "envFrom"
	}
	return false
}

// InEnv reports whether a path from a pod spec lies in a container's (or init container's) env or
// envFrom.
func (p Path) InEnv() bool {
	return len(p) >= 4 && (p[0] == "containers" || p[0] == "initContainers") && (p[2] == "env" || p[2] == "envFrom")
}

// InConfigVolume reports whether a path from a pod spec names the object of a configMap, secret or
// projected volume (not a volume plugin's credentials).
func (p Path) InConfigVolume() bool {
	if len(p) < 3 || p[0] != "volumes" {
		return false
	}
	_, ok := p[1].(int)
	return ok && (p[2] == "configMap" || p[2] == "secret" || p[2] == "projected")
}

func (p Path) String() string {
	var b strings.Builder
	for _, s := range p {
		switch v := s.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", v)
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}

// Use is one place where an object names a config object.
type Use struct {
	Ref
	// Path locates the name: from the pod spec for Uses, from the object's top for ManifestUses.
	Path Path
	// Namespace is the namespace the field names explicitly (a PersistentVolume's secretRef, a
	// Gateway's certificateRefs); empty means the object's own.
	Namespace string
	// Outside is true for a user that is no pod template: an Ingress's TLS Secret, a ServiceAccount's
	// secrets. Such a user does not follow revisions: the renderer refuses to rename what it names.
	Outside bool
	// Keys are the keys of the object this use reads when it reads only some: a configMapKeyRef's or
	// secretKeyRef's key, the items of a volume or projected source. Nil when it reads the whole object
	// (envFrom, a volume or projected source without items, a volume plugin's credentials) or reads
	// none of it (an image pull Secret).
	Keys []string
	// Optional is true where the pod starts without the object (optional: true on the volume, the
	// projected source, the envFrom source or the key reference).
	Optional bool
}

// Uses lists every place the pod spec names a ConfigMap or Secret, in spec order: volumes (configMap,
// secret, projected sources, and the Secret of csi, azureFile, cephfs, cinder, flexVolume, iscsi,
// rbd, scaleIO and storageos volumes), imagePullSecrets, then for initContainers, containers and
// ephemeralContainers their envFrom and env valueFrom. Empty names are skipped: the API server rejects them anyway and they
// cannot be attached.
func Uses(spec *corev1.PodSpec) []Use {
	if spec == nil {
		return nil
	}
	var out []Use
	addOptional := func(kind Kind, name string, keys []string, optional *bool, path ...any) {
		if name != "" {
			out = append(out, Use{Ref: Ref{Kind: kind, Name: name}, Path: path, Keys: keys, Optional: optional != nil && *optional})
		}
	}
	addKeys := func(kind Kind, name string, keys []string, path ...any) { addOptional(kind, name, keys, nil, path...) }
	add := func(kind Kind, name string, path ...any) { addKeys(kind, name, nil, path...) }
	for i, v := range spec.Volumes {
		if v.ConfigMap != nil {
			addOptional(ConfigMap, v.ConfigMap.Name, itemKeys(v.ConfigMap.Items), v.ConfigMap.Optional, "volumes", i, "configMap", "name")
		}
		if v.Secret != nil {
			addOptional(Secret, v.Secret.SecretName, itemKeys(v.Secret.Items), v.Secret.Optional, "volumes", i, "secret", "secretName")
		}
		if v.Projected != nil {
			for j, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					addOptional(ConfigMap, s.ConfigMap.Name, itemKeys(s.ConfigMap.Items), s.ConfigMap.Optional, "volumes", i, "projected", "sources", j, "configMap", "name")
				}
				if s.Secret != nil {
					addOptional(Secret, s.Secret.Name, itemKeys(s.Secret.Items), s.Secret.Optional, "volumes", i, "projected", "sources", j, "secret", "name")
				}
			}
		}
		// Volume plugins that read credentials from a Secret of the pod's namespace.
		secretRef := func(ref *corev1.LocalObjectReference, plugin string) {
			if ref != nil {
				add(Secret, ref.Name, "volumes", i, plugin, "secretRef", "name")
			}
		}
		switch {
		case v.CSI != nil && v.CSI.NodePublishSecretRef != nil:
			add(Secret, v.CSI.NodePublishSecretRef.Name, "volumes", i, "csi", "nodePublishSecretRef", "name")
		case v.AzureFile != nil:
			add(Secret, v.AzureFile.SecretName, "volumes", i, "azureFile", "secretName")
		case v.CephFS != nil:
			secretRef(v.CephFS.SecretRef, "cephfs")
		case v.Cinder != nil:
			secretRef(v.Cinder.SecretRef, "cinder")
		case v.FlexVolume != nil:
			secretRef(v.FlexVolume.SecretRef, "flexVolume")
		case v.ISCSI != nil:
			secretRef(v.ISCSI.SecretRef, "iscsi")
		case v.RBD != nil:
			secretRef(v.RBD.SecretRef, "rbd")
		case v.ScaleIO != nil:
			secretRef(v.ScaleIO.SecretRef, "scaleIO")
		case v.StorageOS != nil:
			secretRef(v.StorageOS.SecretRef, "storageos")
		}
	}
	for i, s := range spec.ImagePullSecrets {
		add(Secret, s.Name, "imagePullSecrets", i, "name")
	}
	env := func(field string, i int, envFrom []corev1.EnvFromSource, env []corev1.EnvVar) {
		for j, e := range envFrom {
			if e.ConfigMapRef != nil {
				addOptional(ConfigMap, e.ConfigMapRef.Name, nil, e.ConfigMapRef.Optional, field, i, "envFrom", j, "configMapRef", "name")
			}
			if e.SecretRef != nil {
				addOptional(Secret, e.SecretRef.Name, nil, e.SecretRef.Optional, field, i, "envFrom", j, "secretRef", "name")
			}
		}
		for j, e := range env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				addOptional(ConfigMap, r.Name, []string{r.Key}, r.Optional, field, i, "env", j, "valueFrom", "configMapKeyRef", "name")
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				addOptional(Secret, r.Name, []string{r.Key}, r.Optional, field, i, "env", j, "valueFrom", "secretKeyRef", "name")
			}
		}
	}
	for i, c := range spec.InitContainers {
		env("initContainers", i, c.EnvFrom, c.Env)
	}
	for i, c := range spec.Containers {
		env("containers", i, c.EnvFrom, c.Env)
	}
	// Ephemeral containers (kubectl debug) are added to a running pod through its ephemeralcontainers
	// subresource, an update no admission of pinning sees (the webhook and the policies pin at
	// creation): what they read, they read by its own name. Listed so that what uses an object counts
	// them (in-use protection, the Unpinned audit); never rewritten (InVolumesOrEnv is false).
	for i, c := range spec.EphemeralContainers {
		env("ephemeralContainers", i, c.EnvFrom, c.Env)
	}
	return out
}

// itemKeys are the keys a volume's items project, nil without items (the whole object).
func itemKeys(items []corev1.KeyToPath) []string {
	if len(items) == 0 {
		return nil
	}
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Key
	}
	return out
}

// Read is what the containers of a pod read of one config object: some keys, or the whole object
// (Keys nil).
type Read struct {
	Ref
	Keys []string
	// Optional is true when every use is optional: the pods start without the object, so whether it
	// exists is part of what they read.
	Optional bool
	// DataOnly is true when the containers read it through env and envFrom only: of a ConfigMap the
	// kubelet puts .data in the environment, never .binaryData.
	DataOnly bool
}

// Whole reports whether the whole object is read.
func (r Read) Whole() bool { return r.Keys == nil }

func (r Read) String() string {
	if r.Whole() {
		return r.Ref.String()
	}
	return r.Ref.String() + "[" + strings.Join(r.Keys, ",") + "]"
}

// Reads lists what the pod spec's containers read, one Read per object, ordered like Set.Sorted: an
// object some use reads whole is read whole, otherwise the union of the keys its uses read, sorted.
// Only what reaches a container counts: its env and envFrom, and the configMap, secret and projected
// volumes some container (or init container) mounts. An image pull Secret is the kubelet's registry
// credential and a volume plugin's Secret (a CSI driver's nodePublishSecretRef, cephfs's secretRef,
// ...) the plugin's: no container reads them; nor does one read a volume no container mounts.
func Reads(spec *corev1.PodSpec) []Read {
	mounted := map[string]bool{}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, m := range c.VolumeMounts {
				mounted[m.Name] = true
			}
		}
	}
	type read struct {
		keys               map[string]bool // nil: read whole
		optional, dataOnly bool
	}
	reads := map[Ref]*read{}
	for _, u := range Uses(spec) {
		env := u.Path.InEnv()
		if !env && !(u.Path.InConfigVolume() && mounted[spec.Volumes[u.Path[1].(int)].Name]) {
			continue
		}
		r, seen := reads[u.Ref]
		if !seen {
			r = &read{keys: map[string]bool{}, optional: true, dataOnly: true}
			reads[u.Ref] = r
		}
		r.optional = r.optional && u.Optional
		r.dataOnly = r.dataOnly && env
		switch {
		case u.Keys == nil:
			r.keys = nil
		case r.keys != nil:
			for _, k := range u.Keys {
				r.keys[k] = true
			}
		}
	}
	set := Set{}
	for r := range reads {
		set[r] = struct{}{}
	}
	out := make([]Read, 0, len(reads))
	for _, ref := range set.Sorted() {
		r := reads[ref]
		rd := Read{Ref: ref, Optional: r.optional, DataOnly: r.dataOnly}
		if r.keys != nil {
			rd.Keys = make([]string, 0, len(r.keys))
			for k := range r.keys {
				rd.Keys = append(rd.Keys, k)
			}
			sort.Strings(rd.Keys)
		}
		out = append(out, rd)
	}
	return out
}

// Set is the distinct config objects a pod spec references.
type Set map[Ref]struct{}

// FromPodSpec returns the distinct config objects the pod spec references.
func FromPodSpec(spec *corev1.PodSpec) Set {
	s := Set{}
	for _, u := range Uses(spec) {
		s[u.Ref] = struct{}{}
	}
	return s
}

// Has reports whether the set contains r.
func (s Set) Has(r Ref) bool {
	_, ok := s[r]
	return ok
}

// Sorted returns the refs ordered by kind then name, for stable output.
func (s Set) Sorted() []Ref {
	out := make([]Ref, 0, len(s))
	for r := range s {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}
