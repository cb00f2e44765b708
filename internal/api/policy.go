package api

// PolicyAdmittedAnnotation is set on a pod by pinning's mutating admission policy to the uid of the
// admission request that created it. The pinning webhook's configuration skips a pod carrying its own
// request's uid there: the policy has pinned it (a switch from policy mode to webhook mode is under
// way). Its value means nothing after admission.
const PolicyAdmittedAnnotation = "configmap-attacher.io/pinned-by-policy"
