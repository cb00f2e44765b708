package trigger

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

// The stored form reads back as written: each revision's content, the values, what was acknowledged
// (apart from its revision's content after a rollback or while our write waits), the key's id.
func TestTheRecordReadsBackAsWritten(t *testing.T) {
	r := newRecord()
	r.Revisions["rs-1"] = map[string]string{"ConfigMap/a": "1111111111", "Secret/b[k]": "2222222222"}
	r.Revisions["rs-2"] = map[string]string{"ConfigMap/a": "3333333333", "Secret/b[k]": "2222222222"}
	r.Values["6aa5937ede"] = true
	r.Key, r.Unpinned = "0123456789", []string{"ConfigMap/a"}
	r.Versions = map[string]string{"ConfigMap/a": "812", "Secret/b[k]": "790"}
	for _, ack := range []acknowledged{
		{Revision: "rs-2", Content: maps.Clone(r.Revisions["rs-2"])},
		{Revision: "rs-1", Content: map[string]string{"ConfigMap/a": "3333333333", "Secret/b[k]": unknownContent}},
		{Revision: "rs-2", Content: map[string]string{"ConfigMap/a": absentContent}, Wrote: &wrote{Value: "6aa5937ede", Set: true, After: 2}},
	} {
		r.Acknowledged = ack
		text, err := r.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(text)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := got.encode()
		if again != text || !maps.Equal(got.Acknowledged.Content, ack.Content) || got.Acknowledged.Revision != ack.Revision ||
			!maps.Equal(got.Revisions["rs-1"], r.Revisions["rs-1"]) || !got.Values["6aa5937ede"] || got.Key != r.Key || !maps.Equal(got.Versions, r.Versions) {
			t.Errorf("%s read back as %+v", text, got)
		}
		if strings.Count(text, "Secret/b[k]") != 1 || strings.Count(text, "2222222222") != 1 {
			t.Errorf("%s: each read and each content once", text)
		}
	}
}

// A record written before issue 37 (a content map per value written and per revision, Secret contents
// hashed plain) is carried over at the first look: no revision starts for it, what it held of a Secret
// is hashed with the key (the plain hash goes), and the next change of the Secret starts one.
func TestARecordOfBeforeIsCarriedOver(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.putOpaque("db-creds", map[string]string{"password": "hunter2"})
	f.deployment.Spec.Template.Spec = testutil.PodSpec([]string{"app-config"}, "db-creds")
	f.deployment.Generation++
	rs := f.observe()
	// Hashes by hand (readagain_test.go): app-config v1 8774ad9c59; db-creds hunter2 plain c064741aae,
	// keyed f75661c6d8.
	old := `{"written":{},"revisions":{"` + string(rs.UID) + `":{"ConfigMap/app-config":"8774ad9c59","Secret/db-creds":"c064741aae"}},` +
		`"acknowledged":{"revision":"` + string(rs.UID) + `","content":{"ConfigMap/app-config":"8774ad9c59","Secret/db-creds":"c064741aae"}},` +
		`"unpinned":["ConfigMap/app-config","Secret/db-creds"]}`
	no := false
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RecordName("Deployment", "web"), Namespace: ns,
		Labels: map[string]string{api.RecordLabel: api.RecordValue}, Annotations: map[string]string{api.RecordAnnotation: old},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: types.UID("uid-web"), Controller: &no}}}}
	cm.ResourceVersion = "1000"
	if _, err := f.kube.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.cs.AllConfigs[refs.ConfigMap].Indexers()[0].Add(metaOf(cm))
	f.sync()
	if n := f.settleThenSync(0); n != 0 {
		t.Fatalf("%d writes at the first look of the new controller, want 0 (%v)", n, f.applied)
	}
	rec := f.recordText()
	if strings.Contains(rec, "c064741aae") || !strings.Contains(rec, "f75661c6d8") {
		t.Fatalf("the record carried over holds %s: want the keyed f75661c6d8 and no plain c064741aae", rec)
	}
	f.putOpaque("db-creds", map[string]string{"password": "hunter3"})
	_, _ = f.try()
	if n := f.settleThenSync(0); n != 1 {
		t.Fatalf("db-creds changed: %d writes, want 1", n)
	}
}

// A record this controller cannot read is never taken for an empty one: another stored form (a newer
// controller's), or one edited into something else, is an error (errUnknownForm) its sync tells and
// leaves alone; a record without versions (written before they were kept) reads as knowing none.
func TestARecordOfAnUnknownFormIsNotRead(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		unknown    bool
	}{
		{"no record yet", "", false},
		{"the form before issue 37", `{"acknowledged":{"revision":"rs-1"}}`, false},
		{"version 2 without versions", `{"v":2,"reads":["ConfigMap/a"],"contents":[["1111111111"]],"made":{"rs-1":"0"},"ack":{"revision":"rs-1"}}`, false},
		{"a newer controller's form", `{"v":3,"ledger":[]}`, true},
		{"not JSON", `hello`, true},
		{"an index out of its list", `{"v":2,"reads":["ConfigMap/a"],"contents":[["1111111111"]],"made":{"rs-1":"7"},"ack":{"revision":"rs-1"}}`, true},
		{"versions not one per read", `{"v":2,"reads":["ConfigMap/a"],"contents":[["1111111111"]],"ack":{},"vers":["1","2"]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decode(tc.text)
			if got := errors.Is(err, errUnknownForm); got != tc.unknown {
				t.Fatalf("decode: %v, want unknown %v", err, tc.unknown)
			}
			if !tc.unknown && len(r.Versions) != 0 {
				t.Errorf("versions %v, want none", r.Versions)
			}
		})
	}
}

// rekey carries a record over to a new hash key: a Secret content equal to what the Secret holds now
// under the old key becomes its hash now, any other unknown; the acknowledged ones that could not be
// carried are returned (counted as changed), an old revision's silently unknown.
func TestRekeyCarriesWhatTheSecretsHoldNow(t *testing.T) {
	isSecret := func(k string) bool { return strings.HasPrefix(k, "Secret/") }
	r := newRecord()
	r.Key = "old-id"
	r.Revisions["rs-1"] = map[string]string{"ConfigMap/a": "1111111111", "Secret/b": "b-old-1", "Secret/c": "c-old-1"}
	r.Revisions["rs-2"] = map[string]string{"ConfigMap/a": "1111111111", "Secret/b": "b-old-2", "Secret/c": "c-old-2"}
	r.Acknowledged = acknowledged{Revision: "rs-2", Content: maps.Clone(r.Revisions["rs-2"])}
	r.Versions = map[string]string{"Secret/b": "10", "Secret/c": "20"}
	lost := r.rekey("new-id", map[string]rekeyed{"Secret/b": {old: "b-old-2", new: "b-new-2"}}, isSecret)
	if r.Key != "new-id" || !slices.Equal(lost, []string{"Secret/c"}) {
		t.Fatalf("rekey: key %s, lost %v; want new-id, [Secret/c]", r.Key, lost)
	}
	want := map[string]string{"ConfigMap/a": "1111111111", "Secret/b": "b-new-2", "Secret/c": unknownContent}
	if !maps.Equal(r.Acknowledged.Content, want) || !maps.Equal(r.Revisions["rs-2"], want) {
		t.Errorf("acknowledged %v, rs-2 %v; want %v", r.Acknowledged.Content, r.Revisions["rs-2"], want)
	}
	if r.Revisions["rs-1"]["Secret/b"] != unknownContent || r.Revisions["rs-1"]["ConfigMap/a"] != "1111111111" {
		t.Errorf("rs-1 %v: its Secret contents unknown, its ConfigMap's kept", r.Revisions["rs-1"])
	}
	if _, ok := r.Versions["Secret/c"]; ok {
		t.Errorf("versions %v: Secret/c, unknown now, has no version of the acknowledged content", r.Versions)
	}
	if again := r.rekey("new-id", nil, isSecret); again != nil {
		t.Errorf("rekey to the same key: %v, want nothing", again)
	}
}

// noteVersions keeps the version of each object that holds the acknowledged content, and only those.
func TestNoteVersionsKeepsWhatHoldsTheAcknowledgedContent(t *testing.T) {
	r := newRecord()
	r.Acknowledged.Content = map[string]string{"ConfigMap/a": "1111111111", "ConfigMap/b": "2222222222", "ConfigMap/gone": "3333333333"}
	r.Versions = map[string]string{"ConfigMap/b": "5", "ConfigMap/gone": "6"}
	r.noteVersions(map[string]string{"ConfigMap/a": "1111111111", "ConfigMap/b": "changed000", "ConfigMap/new": "4444444444"},
		map[string]string{"ConfigMap/a": "12", "ConfigMap/b": "13", "ConfigMap/new": "14"})
	if want := map[string]string{"ConfigMap/a": "12"}; !maps.Equal(r.Versions, want) {
		t.Errorf("versions %v, want %v", r.Versions, want)
	}
}
