package trigger

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Reloader's annotations, read the way Reloader v1.4.14 reads them (pkg/common.ShouldReload and
// internal/pkg/handler/upgrade.go), per config kind:
//
//   - an object with reloader.stakater.com/ignore: "true" is never followed;
//   - a name in the kind's exclude list (exact names, workload metadata only) is never followed;
//   - a name matching an entry of the kind's reload list (each entry an anchored regular expression)
//     is followed whether or not the pod template reads it;
//   - with reloader.stakater.com/search: "true", an object the template reads that carries
//     reloader.stakater.com/match: "true" is followed;
//   - with reloader.stakater.com/auto or the kind's own auto annotation true (strconv.ParseBool),
//     every object of the kind the template reads is followed.
//
// The reload list, auto, the kind's auto and search are read from the workload's metadata; when none
// of them is there for a kind, from its pod template's annotations, as Reloader falls back.

// kindAnnotations are Reloader's per-kind annotation names.
type kindAnnotations struct{ auto, reload, exclude string }

var perKind = map[refs.Kind]kindAnnotations{
	refs.ConfigMap: {api.ReloaderConfigMapAuto, api.ReloaderConfigMapReload, api.ReloaderConfigMapExclude},
	refs.Secret:    {api.ReloaderSecretAuto, api.ReloaderSecretReload, api.ReloaderSecretExclude},
}

// Selection is what a workload's Reloader annotations select, per config kind.
type Selection struct {
	kinds map[refs.Kind]*kindSelection
	// Invalid lists what makes the annotations unusable (a malformed list): nothing is followed.
	Invalid []string
	// Unsupported lists the Reloader annotations present that we do not honour, each with why and
	// what happens instead.
	Unsupported []string
}

type kindSelection struct {
	auto, search bool
	reload       []*regexp.Regexp
	literal      []string // reload entries that are plain names: a missing one is reported
	exclude      []string
}

// OptedIn reports whether the annotations select anything at all.
func (s Selection) OptedIn() bool {
	for _, k := range s.kinds {
		if k.auto || k.search || len(k.reload) > 0 {
			return true
		}
	}
	return len(s.Invalid) > 0
}

// Select reads a workload's Reloader annotations (u.Annotations: its metadata's, as the caches keep
// them; u.TemplateAnnotations: its pod template's).
func Select(u *caches.User) Selection {
	s := Selection{kinds: map[refs.Kind]*kindSelection{}}
	meta, tmpl := u.Annotations, u.TemplateAnnotations
	for _, kind := range refs.Kinds() {
		names := perKind[kind]
		from := meta
		if !hasAny(meta, names.reload, api.ReloaderAuto, names.auto, api.ReloaderSearch) {
			from = tmpl
		}
		k := &kindSelection{
			auto:    parseBool(from[api.ReloaderAuto]) || parseBool(from[names.auto]),
			search:  from[api.ReloaderSearch] == "true",
			exclude: splitList(meta[names.exclude]),
		}
		for _, entry := range splitList(from[names.reload]) {
			re, err := regexp.Compile("^" + entry + "$")
			if err != nil {
				s.Invalid = append(s.Invalid, fmt.Sprintf("%s: entry %q is not a valid regular expression (%v); write names separated by commas, e.g. app-config,other-config",
					names.reload, entry, err))
				continue
			}
			k.reload = append(k.reload, re)
			if regexp.QuoteMeta(entry) == entry {
				k.literal = append(k.literal, entry)
			}
		}
		s.kinds[kind] = k
	}
	if len(s.Invalid) > 0 {
		s.kinds = map[refs.Kind]*kindSelection{}
	}
	s.Unsupported = unsupported(u)
	return s
}

// Follows reports whether the workload follows config object m of kind, given whether its pod template
// reads it.
func (s Selection) Follows(kind refs.Kind, m *metav1.PartialObjectMetadata, read bool) bool {
	k, ok := s.kinds[kind]
	if !ok || m.Annotations[api.ReloaderIgnore] == "true" || slices.Contains(k.exclude, m.Name) || ours(m) {
		return false
	}
	for _, re := range k.reload {
		if re.MatchString(m.Name) {
			return true
		}
	}
	return read && (k.auto || (k.search && m.Annotations[api.ReloaderMatch] == "true"))
}

// Named returns the plain names the kind's reload list gives, except excluded ones: each should exist.
func (s Selection) Named(kind refs.Kind) []string {
	k, ok := s.kinds[kind]
	if !ok {
		return nil
	}
	var out []string
	for _, n := range k.literal {
		if !slices.Contains(k.exclude, n) {
			out = append(out, n)
		}
	}
	return out
}

// ours reports whether a config object is one of our snapshots or records: a reload list matching it
// by pattern must not make our own writes start revisions.
func ours(m *metav1.PartialObjectMetadata) bool {
	return m.Labels[api.SnapshotLabel] == api.SnapshotValue || m.Labels[api.RecordLabel] == api.RecordValue
}

// unsupported lists the Reloader annotations present that we do not honour, with what happens instead.
func unsupported(u *caches.User) []string {
	var out []string
	has := func(k string) (string, bool) {
		if v, ok := u.Annotations[k]; ok {
			return v, true
		}
		v, ok := u.TemplateAnnotations[k]
		return v, ok
	}
	if v, ok := has(api.ReloaderRolloutStrategy); ok && v == "restart" && u.Kind() == caches.Rollout {
		out = append(out, api.ReloaderRolloutStrategy+`: "restart" is not honoured: it restarts every pod at once (spec.restartAt) and skips the canary; `+
			"a config change starts a new revision that goes through the Rollout's strategy instead")
	}
	if _, ok := has(api.ReloaderPausePeriod); ok {
		out = append(out, api.ReloaderPausePeriod+" is not honoured: a burst of config changes within the settle window (-config-settle) "+
			"starts one revision instead of pausing the Deployment")
	}
	for _, k := range []string{api.ReloaderProviderClassAuto, api.ReloaderProviderClassReload, api.ReloaderProviderClassExclude} {
		if _, ok := has(k); ok {
			out = append(out, k+" is not honoured: SecretProviderClasses (the Secrets Store CSI driver) are not followed; "+
				"a change of a ConfigMap or Secret the pod template reads still starts a revision")
		}
	}
	return out
}

// optedInAnyKind reports whether an object of a kind we do not revise (a bare pod, a Job, a CronJob)
// carries an annotation that opts a workload in.
func optedInAnyKind(u *caches.User) bool {
	for _, k := range []string{api.ReloaderAuto, api.ReloaderConfigMapAuto, api.ReloaderSecretAuto,
		api.ReloaderConfigMapReload, api.ReloaderSecretReload, api.ReloaderSearch} {
		if u.Annotations[k] != "" || u.TemplateAnnotations[k] != "" {
			return true
		}
	}
	return false
}

func hasAny(m map[string]string, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// splitList splits a comma list as Reloader does, trimming spaces; empty entries are dropped (Reloader
// turns one into "^$", which matches no name).
func splitList(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func parseBool(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}
