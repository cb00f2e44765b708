package trigger

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

func object(name string, annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Annotations: annotations}}
}

// Reloader's semantics (pkg/common.ShouldReload of v1.4.14), one case per rule; the cases of its own
// e2e suite (test/e2e/annotations, core) are listed in docs/config-starts.md with where each is proved.
func TestSelectFollowsAsReloaderDoes(t *testing.T) {
	match := map[string]string{api.ReloaderMatch: "true"}
	ignore := map[string]string{api.ReloaderIgnore: "true"}
	for _, tc := range []struct {
		name      string
		meta      map[string]string // workload metadata annotations
		tmpl      map[string]string // pod template annotations
		kind      refs.Kind
		obj       *metav1.PartialObjectMetadata
		read      bool // the pod template reads it
		want      bool
		optedIn   bool
		unhonored string
	}{
		{"auto follows what the template reads", map[string]string{api.ReloaderAuto: "true"}, nil, refs.ConfigMap, object("a", nil), true, true, true, ""},
		{"auto does not follow what the template does not read", map[string]string{api.ReloaderAuto: "true"}, nil, refs.ConfigMap, object("a", nil), false, false, true, ""},
		{"auto parses as strconv.ParseBool", map[string]string{api.ReloaderAuto: "True"}, nil, refs.Secret, object("s", nil), true, true, true, ""},
		{"auto false is off", map[string]string{api.ReloaderAuto: "false"}, nil, refs.ConfigMap, object("a", nil), true, false, false, ""},
		{"the ConfigMap auto follows ConfigMaps", map[string]string{api.ReloaderConfigMapAuto: "true"}, nil, refs.ConfigMap, object("a", nil), true, true, true, ""},
		{"the ConfigMap auto does not follow Secrets", map[string]string{api.ReloaderConfigMapAuto: "true"}, nil, refs.Secret, object("s", nil), true, false, true, ""},
		{"the Secret auto follows Secrets", map[string]string{api.ReloaderSecretAuto: "true"}, nil, refs.Secret, object("s", nil), true, true, true, ""},
		{"auto false, the kind's auto true: either suffices", map[string]string{api.ReloaderAuto: "false", api.ReloaderConfigMapAuto: "true"}, nil, refs.ConfigMap, object("a", nil), true, true, true, ""},
		{"a reload list names it, read or not", map[string]string{api.ReloaderConfigMapReload: "x, a"}, nil, refs.ConfigMap, object("a", nil), false, true, true, ""},
		{"reload entries are anchored regular expressions", map[string]string{api.ReloaderConfigMapReload: "app-.*"}, nil, refs.ConfigMap, object("app-config", nil), false, true, true, ""},
		{"anchored: no partial match", map[string]string{api.ReloaderConfigMapReload: "app"}, nil, refs.ConfigMap, object("app-config", nil), true, false, true, ""},
		{"the ConfigMap list does not name Secrets", map[string]string{api.ReloaderConfigMapReload: "a"}, nil, refs.Secret, object("a", nil), true, false, true, ""},
		{"search follows what the template reads and matches", map[string]string{api.ReloaderSearch: "true"}, nil, refs.ConfigMap, object("a", match), true, true, true, ""},
		{"search: not without match", map[string]string{api.ReloaderSearch: "true"}, nil, refs.ConfigMap, object("a", nil), true, false, true, ""},
		{"search: not what the template does not read", map[string]string{api.ReloaderSearch: "true"}, nil, refs.ConfigMap, object("a", match), false, false, true, ""},
		{"ignore on the object wins over everything", map[string]string{api.ReloaderAuto: "true", api.ReloaderConfigMapReload: "a"}, nil, refs.ConfigMap, object("a", ignore), true, false, true, ""},
		{"exclude wins over auto", map[string]string{api.ReloaderAuto: "true", api.ReloaderConfigMapExclude: "b, a"}, nil, refs.ConfigMap, object("a", nil), true, false, true, ""},
		{"exclude wins over a reload list", map[string]string{api.ReloaderConfigMapReload: "a", api.ReloaderConfigMapExclude: "a"}, nil, refs.ConfigMap, object("a", nil), true, false, true, ""},
		{"the Secret exclude does not exclude ConfigMaps", map[string]string{api.ReloaderAuto: "true", api.ReloaderSecretExclude: "a"}, nil, refs.ConfigMap, object("a", nil), true, true, true, ""},
		{"the template's annotations when the metadata has none", nil, map[string]string{api.ReloaderAuto: "true"}, refs.ConfigMap, object("a", nil), true, true, true, ""},
		{"not the template's when the metadata has one for the kind", map[string]string{api.ReloaderConfigMapReload: "b"}, map[string]string{api.ReloaderAuto: "true"}, refs.ConfigMap, object("a", nil), true, false, true, ""},
		{"per kind: the template's for Secrets when the metadata has only ConfigMap's", map[string]string{api.ReloaderConfigMapReload: "b"}, map[string]string{api.ReloaderSecretAuto: "true"}, refs.Secret, object("a", nil), true, true, true, ""},
		{"auto and a reload list together: the reload list's object", map[string]string{api.ReloaderAuto: "true", api.ReloaderConfigMapReload: "listed"}, nil, refs.ConfigMap, object("listed", nil), false, true, true, ""},
		{"auto and a reload list together: what auto finds", map[string]string{api.ReloaderAuto: "true", api.ReloaderConfigMapReload: "listed"}, nil, refs.ConfigMap, object("read", nil), true, true, true, ""},
		{"on the metadata and the template alike: followed", map[string]string{api.ReloaderConfigMapReload: "a"}, map[string]string{api.ReloaderConfigMapReload: "a"}, refs.ConfigMap, object("a", nil), true, true, true, ""},
		{"a ConfigMap list on the template: a Secret read is not followed", nil, map[string]string{api.ReloaderConfigMapReload: "a"}, refs.Secret, object("s", nil), true, false, true, ""},
		{"search and match on the template (Reloader's case is pending; its code falls back too)", nil, map[string]string{api.ReloaderSearch: "true"}, refs.ConfigMap, object("a", match), true, true, true, ""},
		{"exclude is read from the metadata only", map[string]string{api.ReloaderAuto: "true"}, map[string]string{api.ReloaderConfigMapExclude: "a"}, refs.ConfigMap, object("a", nil), true, true, true, ""},
		{"no annotation: nothing", nil, nil, refs.ConfigMap, object("a", nil), true, false, false, ""},
		{"our snapshots are never followed", map[string]string{api.ReloaderConfigMapReload: "a.*"}, nil, refs.ConfigMap,
			&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "a-0123456789", Labels: map[string]string{api.SnapshotLabel: api.SnapshotValue}}}, false, false, true, ""},
		{"our records are never followed", map[string]string{api.ReloaderConfigMapReload: ".*"}, nil, refs.ConfigMap,
			&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "configmap-attacher.deployment.web", Labels: map[string]string{api.RecordLabel: api.RecordValue}}}, false, false, true, ""},
		{"rollout-strategy restart is reported", map[string]string{api.ReloaderAuto: "true", api.ReloaderRolloutStrategy: "restart"}, nil, refs.ConfigMap, object("a", nil), true, true, true, "skips the canary"},
		{"pause-period is reported", map[string]string{api.ReloaderAuto: "true", api.ReloaderPausePeriod: "5m"}, nil, refs.ConfigMap, object("a", nil), true, true, true, "settle window"},
		{"SecretProviderClass annotations are reported", map[string]string{api.ReloaderProviderClassAuto: "true"}, nil, refs.ConfigMap, object("a", nil), true, false, false, "Secrets Store CSI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &caches.User{TypeMeta: metav1.TypeMeta{Kind: "Rollout"}, Annotations: tc.meta, TemplateAnnotations: tc.tmpl}
			s := Select(u)
			if got := s.Follows(tc.kind, tc.obj, tc.read); got != tc.want {
				t.Errorf("Follows = %v, want %v", got, tc.want)
			}
			if s.OptedIn() != tc.optedIn {
				t.Errorf("OptedIn = %v, want %v", s.OptedIn(), tc.optedIn)
			}
			if got := strings.Join(s.Unsupported, "; "); (tc.unhonored == "") != (got == "") || !strings.Contains(got, tc.unhonored) {
				t.Errorf("Unsupported = %q, want one saying %q", got, tc.unhonored)
			}
		})
	}
}

func TestSelectRefusesAMalformedList(t *testing.T) {
	u := &caches.User{Annotations: map[string]string{api.ReloaderConfigMapReload: "app-config,[broken"}}
	s := Select(u)
	if len(s.Invalid) != 1 || !strings.Contains(s.Invalid[0], `"[broken"`) || !strings.Contains(s.Invalid[0], api.ReloaderConfigMapReload) {
		t.Fatalf("Invalid = %q, want the annotation and the bad entry named", s.Invalid)
	}
	if !s.OptedIn() || s.Follows(refs.ConfigMap, object("app-config", nil), true) {
		t.Error("a workload with a malformed list must be reported (opted in) and follow nothing")
	}
}

func TestNamedListsThePlainNamesNotExcluded(t *testing.T) {
	u := &caches.User{Annotations: map[string]string{
		api.ReloaderConfigMapReload: "a, app-.*, b", api.ReloaderConfigMapExclude: "b"}}
	if got := Select(u).Named(refs.ConfigMap); len(got) != 1 || got[0] != "a" {
		t.Errorf("Named = %v, want [a]: patterns cannot be missing, excluded names are not followed", got)
	}
}
