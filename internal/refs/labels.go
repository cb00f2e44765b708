package refs

// RevisionedLabel opts a ConfigMap or Secret in: the chart and the renderer set it, and the controller
// attaches nothing without it, so a hand-made object never becomes garbage because a workload went away.
// Scripts rely on this exact key and value.
const (
	RevisionedLabel = "configmap-attacher.io/revisioned"
	RevisionedValue = "true"
)

// AttachAllAnnotation on a Rollout or Deployment (value "true") opts in every ConfigMap and Secret its
// ReplicaSets reference, labelled or not. Risky by design: an object shared with another workload gets
// deleted when the last ReplicaSet of this one goes. Documented in docs/controller.md.
const AttachAllAnnotation = "configmap-attacher.io/attach-all"

// OriginalNameAnnotation records the name a revisioned object had before `render` gave it its content
// hash: how a second render recognises its own output and how `diff` pairs revisions of one object.
const OriginalNameAnnotation = "configmap-attacher.io/name"
