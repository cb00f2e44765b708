package render

import "strings"

// podSpecPath says where an object of this apiVersion and kind keeps the pod spec its pods are made
// from, or nil when it has none. The version is ignored: a manifest may still say apps/v1beta2 or
// extensions/v1beta1, and the fields are the same.
func podSpecPath(apiVersion, kind string) []any {
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		group = ""
	}
	template := []any{"spec", "template", "spec"}
	switch group {
	case "":
		switch kind {
		case "Pod":
			return []any{"spec"}
		case "PodTemplate":
			return []any{"template", "spec"}
		case "ReplicationController":
			return template
		}
	case "apps", "extensions":
		switch kind {
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
			return template
		}
	case "batch":
		switch kind {
		case "Job":
			return template
		case "CronJob":
			return []any{"spec", "jobTemplate", "spec", "template", "spec"}
		}
	case "argoproj.io":
		// A Rollout with spec.workloadRef has no template: the Deployment it points to is in the
		// input (or not) on its own and is rewritten as any Deployment.
		if kind == "Rollout" {
			return template
		}
	}
	return nil
}
