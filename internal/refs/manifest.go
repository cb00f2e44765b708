package refs

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// PodSpecPaths says where an object of this apiVersion and kind keeps the pod specs its pods are made
// from: one for a workload, several for Argo Rollouts' analysis and experiment templates, none for
// other kinds. obj is the object as JSON decodes it (only read for the kinds with several). The version
// is ignored: a manifest may still say apps/v1beta2 or extensions/v1beta1, and the fields are the same.
func PodSpecPaths(apiVersion, kind string, obj map[string]any) []Path {
	template := Path{"spec", "template", "spec"}
	switch group(apiVersion) {
	case "":
		switch kind {
		case "Pod":
			return []Path{{"spec"}}
		case "PodTemplate":
			return []Path{{"template", "spec"}}
		case "ReplicationController":
			return []Path{template}
		}
	case "apps", "extensions":
		switch kind {
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
			return []Path{template}
		}
	case "batch":
		switch kind {
		case "Job":
			return []Path{template}
		case "CronJob":
			return []Path{{"spec", "jobTemplate", "spec", "template", "spec"}}
		}
	case "argoproj.io":
		switch kind {
		case "Rollout":
			// A Rollout with spec.workloadRef has no template: its Deployment is a manifest of its own.
			return []Path{template}
		case "AnalysisTemplate", "ClusterAnalysisTemplate":
			var out []Path
			for i, m := range list(at(obj, "spec", "metrics")) {
				if at(m, "provider", "job") != nil {
					out = append(out, Path{"spec", "metrics", i, "provider", "job", "spec", "template", "spec"})
				}
			}
			return out
		case "Experiment":
			var out []Path
			for i := range list(at(obj, "spec", "templates")) {
				out = append(out, Path{"spec", "templates", i, "template", "spec"})
			}
			return out
		}
	}
	return nil
}

// ManifestUses lists every place a manifest (one object, as JSON) names a ConfigMap or Secret, with
// paths from the object's top: the references of its pod specs, then those outside any pod.
func ManifestUses(apiVersion, kind string, raw []byte) ([]Use, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	var out []Use
	for _, p := range PodSpecPaths(apiVersion, kind, obj) {
		spec, err := objectAt(obj, p)
		if err != nil || spec == nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		specRaw, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		var podSpec corev1.PodSpec
		if err := utiljson.Unmarshal(specRaw, &podSpec); err != nil {
			return nil, fmt.Errorf("%s is not a valid pod spec: %w", p, err)
		}
		for _, u := range Uses(&podSpec) {
			u.Path = append(append(Path{}, p...), u.Path...)
			out = append(out, u)
		}
	}
	return append(out, outside(apiVersion, kind, obj)...), nil
}

// outside lists the references of an object outside its pod specs. Argo Rollouts' analysis arguments
// move with the release like its pod templates; the rest (an Ingress's TLS Secret, a ServiceAccount's
// secrets, a PersistentVolume's or a Gateway's Secrets) are users that follow no revision.
func outside(apiVersion, kind string, obj map[string]any) []Use {
	var out []Use
	add := func(k Kind, name any, ns any, outsider bool, path ...any) {
		n, _ := name.(string)
		namespace, _ := ns.(string)
		if n != "" {
			out = append(out, Use{Ref: Ref{Kind: k, Name: n}, Path: path, Namespace: namespace, Outside: outsider})
		}
	}
	switch g := group(apiVersion); {
	case g == "argoproj.io" && (kind == "AnalysisTemplate" || kind == "ClusterAnalysisTemplate"):
		for i, a := range list(at(obj, "spec", "args")) {
			add(Secret, at(a, "valueFrom", "secretKeyRef", "name"), nil, false, "spec", "args", i, "valueFrom", "secretKeyRef", "name")
		}
	case (g == "networking.k8s.io" || g == "extensions") && kind == "Ingress":
		for i, t := range list(at(obj, "spec", "tls")) {
			add(Secret, at(t, "secretName"), nil, true, "spec", "tls", i, "secretName")
		}
	case g == "" && kind == "ServiceAccount":
		for i, s := range list(at(obj, "secrets")) {
			add(Secret, at(s, "name"), at(s, "namespace"), true, "secrets", i, "name")
		}
		for i, s := range list(at(obj, "imagePullSecrets")) {
			add(Secret, at(s, "name"), nil, true, "imagePullSecrets", i, "name")
		}
	case g == "" && kind == "PersistentVolume":
		for _, f := range []string{"nodePublishSecretRef", "controllerPublishSecretRef", "nodeStageSecretRef", "controllerExpandSecretRef", "nodeExpandSecretRef"} {
			ref := at(obj, "spec", "csi", f)
			add(Secret, at(ref, "name"), at(ref, "namespace"), true, "spec", "csi", f, "name")
		}
	case g == "gateway.networking.k8s.io" && kind == "Gateway":
		for i, l := range list(at(obj, "spec", "listeners")) {
			for j, c := range list(at(l, "tls", "certificateRefs")) {
				if k, _ := at(c, "kind").(string); k != "" && k != "Secret" {
					continue
				}
				if g, _ := at(c, "group").(string); g != "" {
					continue
				}
				add(Secret, at(c, "name"), at(c, "namespace"), true, "spec", "listeners", i, "tls", "certificateRefs", j, "name")
			}
		}
	}
	return out
}

// objectAt returns the object at path, nil when a key along it is absent or null, and an error when
// something along it is there but is not an object (the API server would refuse such a manifest).
func objectAt(v any, path Path) (map[string]any, error) {
	for i, p := range path {
		if v == nil {
			return nil, nil
		}
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s is not an object", path[:i])
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s is not a list", path[:i])
			}
			if k >= len(s) {
				return nil, nil
			}
			v = s[k]
		}
	}
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", path)
	}
	return m, nil
}

func group(apiVersion string) string {
	g, _, found := strings.Cut(apiVersion, "/")
	if !found {
		return ""
	}
	return g
}

// at returns the value at path in decoded JSON, nil when absent.
func at(v any, path ...any) any { return Path(path).In(v) }

func list(v any) []any {
	s, _ := v.([]any)
	return s
}
