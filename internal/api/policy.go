package api

// PolicyAdmittedAnnotation is set on a pod by pinning's mutating admission policy: to the pod's
// revision key when the policy pinned it from its revision's entry (the key: its controlling
// ReplicaSet's uid; its StatefulSet's or DaemonSet's uid and controller-revision-hash, "<uid>/<hash>"),
// empty when there was none. The pinning webhook's configuration skips a pod whose annotation holds its
// own revision's key: the policy has pinned it (a switch from policy mode to webhook mode is under
// way). A pod template cannot carry it: the key names a revision made from that template.
const PolicyAdmittedAnnotation = "configmap-attacher.io/pinned-by-policy"

// PinEntryAnnotation is written by the PinTable controller, for a moment, in the metadata of the
// object whose update wakes a revision's controller (a ReplicaSet; a DaemonSet's ControllerRevision;
// a StatefulSet) when it has written the entry of a revision whose pods were refused while it had none:
// the workload's controller otherwise retries refused pods after its own back-off (up to 1,000 s). Its
// value is when the entry was written. It is removed again a few seconds later (the removal is a second
// wake-up): an annotation left on a ReplicaSet would be copied onto its Deployment by `kubectl rollout
// undo`.
const PinEntryAnnotation = "configmap-attacher.io/pin-entry-written"
