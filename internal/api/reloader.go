package api

// A config change starts a revision (docs/config-starts.md): workloads opt in with stakater/Reloader's
// own annotations, spelled exactly as Reloader spells them (v1.4.14, internal/pkg/options/flags.go), so
// a cluster swaps Reloader for us without touching a manifest. The controller writes one annotation on
// the pod template of such a workload, ConfigHashAnnotation, and nothing else of it.
const (
	// ConfigHashAnnotation on a pod template is the hash of the content of the config objects the
	// controller started that revision for: written with server-side apply under FieldManager, which
	// owns that one annotation. Scripts rely on the key.
	ConfigHashAnnotation = "configmap-attacher.io/config-hash"

	// RecordLabel=RecordValue marks the record objects the controller keeps, one per workload that
	// opted in: a ConfigMap owned by the workload holding, in RecordAnnotation, the content each of its
	// revisions was created with (for the objects no snapshot pins), the content last acknowledged and
	// the config-hash values it wrote.
	RecordLabel      = "configmap-attacher.io/record"
	RecordValue      = "true"
	RecordAnnotation = "configmap-attacher.io/record"

	// KeyLabel=KeyValue marks the Secret, in the controller's namespace, holding the key of the hash
	// the trigger keeps of what a workload reads of a Secret (in records and in ConfigHashAnnotation):
	// keyed, those values tell nothing to whoever may read them but not the Secret.
	KeyLabel = "configmap-attacher.io/config-hash-key"
	KeyValue = "true"
)

// Reloader's annotations on a workload's metadata (or, where Reloader falls back to it, its pod
// template's).
const (
	ReloaderAuto          = "reloader.stakater.com/auto"
	ReloaderConfigMapAuto = "configmap.reloader.stakater.com/auto"
	ReloaderSecretAuto    = "secret.reloader.stakater.com/auto"
	// Comma lists; Reloader matches each entry as an anchored regular expression.
	ReloaderConfigMapReload = "configmap.reloader.stakater.com/reload"
	ReloaderSecretReload    = "secret.reloader.stakater.com/reload"
	ReloaderSearch          = "reloader.stakater.com/search"
	// Comma lists of exact names never to follow; read from the workload's metadata only.
	ReloaderConfigMapExclude = "configmaps.exclude.reloader.stakater.com/reload"
	ReloaderSecretExclude    = "secrets.exclude.reloader.stakater.com/reload"

	// Not honoured: a Warning event says why and what happens instead.
	ReloaderRolloutStrategy      = "reloader.stakater.com/rollout-strategy"
	ReloaderPausePeriod          = "deployment.reloader.stakater.com/pause-period"
	ReloaderProviderClassAuto    = "secretproviderclass.reloader.stakater.com/auto"
	ReloaderProviderClassReload  = "secretproviderclass.reloader.stakater.com/reload"
	ReloaderProviderClassExclude = "secretproviderclasses.exclude.reloader.stakater.com/reload"
)

// Reloader's annotations on a ConfigMap or Secret.
const (
	// ReloaderMatch="true" makes the object followed by workloads with ReloaderSearch="true".
	ReloaderMatch = "reloader.stakater.com/match"
	// ReloaderIgnore="true": no workload follows the object.
	ReloaderIgnore = "reloader.stakater.com/ignore"
)

// ReloaderWorkloadAnnotations are the annotations of a workload the controller reads; the caches keep
// these and drop every other annotation.
func ReloaderWorkloadAnnotations() []string {
	return []string{ReloaderAuto, ReloaderConfigMapAuto, ReloaderSecretAuto, ReloaderConfigMapReload, ReloaderSecretReload,
		ReloaderSearch, ReloaderConfigMapExclude, ReloaderSecretExclude, ReloaderRolloutStrategy, ReloaderPausePeriod,
		ReloaderProviderClassAuto, ReloaderProviderClassReload, ReloaderProviderClassExclude}
}
