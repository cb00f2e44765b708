package trigger

import (
	"context"
	"maps"
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
			!maps.Equal(got.Revisions["rs-1"], r.Revisions["rs-1"]) || !got.Values["6aa5937ede"] || got.Key != r.Key {
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
