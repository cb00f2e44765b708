package api

// PolicyAdmittedAnnotation is set on a pod by pinning's mutating admission policy: to the pod's
// revision key when the policy pinned it from its revision's entry (the key: its controlling
// ReplicaSet's uid; its StatefulSet's or DaemonSet's uid and controller-revision-hash, "<uid>/<hash>"),
// empty when there was none. The pinning webhook's configuration skips a pod whose annotation holds its
// own revision's key: the policy has pinned it (a switch from policy mode to webhook mode is under
// way). A pod template cannot carry it: the key names a revision made from that template.
const PolicyAdmittedAnnotation = "configmap-attacher.io/pinned-by-policy"
