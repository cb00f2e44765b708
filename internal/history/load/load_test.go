package load

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/history/historytest"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

func TestRead(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "demo-cm-1", Namespace: testutil.Namespace}, Data: map[string]string{"k": "v"}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "demo-env-1", Namespace: testutil.Namespace}, Data: map[string][]byte{"TOKEN": []byte("t")}}
	metaOf := func(kind refs.Kind, m metav1.ObjectMeta) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(kind)}, ObjectMeta: m}
	}
	kc := kubefake.NewClientset(cm, sec)
	c := &kube.Clients{Kube: kc, Metadata: testutil.FakeMetadata(metaOf(refs.ConfigMap, cm.ObjectMeta), metaOf(refs.Secret, sec.ObjectMeta))}
	wanted := []refs.Ref{{Kind: refs.ConfigMap, Name: "demo-cm-1"}, {Kind: refs.ConfigMap, Name: "gone"}, {Kind: refs.Secret, Name: "demo-env-1"}}
	ctx := context.Background()

	t.Run("history reads metadata only", func(t *testing.T) {
		objs, err := Read(ctx, c, testutil.Namespace, wanted, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 2 || objs[wanted[1]] != nil {
			t.Fatalf("read %v; want the two existing objects", objs)
		}
		for _, o := range objs {
			if o.Content != nil {
				t.Errorf("%s read with content", o.Ref)
			}
		}
		if n := len(kc.Actions()); n != 0 {
			t.Errorf("%d reads through the typed client (Secret values): %v", n, kc.Actions())
		}
	})
	t.Run("diff reads content", func(t *testing.T) {
		objs, err := Read(ctx, c, testutil.Namespace, wanted, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(objs[wanted[2]].Content.Data["TOKEN"]); got != "t" {
			t.Errorf("Secret TOKEN = %q", got)
		}
		if got := string(objs[wanted[0]].Content.Data["k"]); got != "v" {
			t.Errorf("ConfigMap k = %q", got)
		}
	})
	t.Run("forbidden says what to grant", func(t *testing.T) {
		kc := kubefake.NewClientset(cm)
		kc.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "demo-env-1", errors.New("no"))
		})
		_, err := Read(ctx, &kube.Clients{Kube: kc}, testutil.Namespace, wanted, true)
		if err == nil || !strings.Contains(err.Error(), "RBAC") || !strings.Contains(err.Error(), "Secret devops-apps-01/demo-env-1") {
			t.Errorf("err = %v", err)
		}
	})
}

// pinnedClients serves the Pinned fixture: the typed client holds the objects whole, the metadata
// client their metadata, as the API server would.
func pinnedClients(t *testing.T) (*kube.Clients, *kubefake.Clientset, *metafake.FakeMetadataClient, historytest.Fixture) {
	t.Helper()
	f := historytest.Pinned()
	var typed, meta []runtime.Object
	for _, o := range f.Objs {
		m := o.Meta.DeepCopy()
		switch o.Ref.Kind {
		case refs.ConfigMap:
			cm := &corev1.ConfigMap{ObjectMeta: *m, Data: map[string]string{}}
			for k, v := range o.Content.Data {
				cm.Data[k] = string(v)
			}
			typed = append(typed, cm)
		case refs.Secret:
			typed = append(typed, &corev1.Secret{ObjectMeta: *m, Type: corev1.SecretType(o.Content.Type), Data: o.Content.Data})
		}
		meta = append(meta, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(o.Ref.Kind)}, ObjectMeta: *m})
	}
	kc := kubefake.NewClientset(typed...)
	mc := testutil.FakeMetadata(meta...)
	return &kube.Clients{Kube: kc, Metadata: mc}, kc, mc, f
}

func actions(as []k8stesting.Action) []string {
	var out []string
	for _, a := range as {
		s := a.GetVerb() + " " + a.GetResource().Resource
		if g, ok := a.(k8stesting.GetAction); ok {
			s += "/" + g.GetName()
		}
		if l, ok := a.(k8stesting.ListAction); ok {
			s += "?" + l.GetListRestrictions().Labels.String()
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func TestHistoryReadsPinnedContentOnlyToHashIt(t *testing.T) {
	c, kc, mc, f := pinnedClients(t)
	h, err := History(context.Background(), c, f.Res)
	if err != nil {
		t.Fatal(err)
	}
	want := f.History() // the fixture's own LiveSnapshot names are what load must compute
	if !reflect.DeepEqual(h, want) {
		t.Errorf("history read through the API differs from the fixture's:\n%+v\nwant\n%+v", h, want)
	}
	if len(h.Drift) != 1 || h.Revisions[0].Config[0].Snapshot == "" {
		t.Errorf("no pins or drift found: %+v", h)
	}
	// Whole objects: only the pinned ones the current revision reads through a snapshot, to hash them.
	if got, want := actions(kc.Actions()), []string{"get configmaps/app-config", "get secrets/app-env"}; !reflect.DeepEqual(got, want) {
		t.Errorf("typed reads %v, want %v", got, want)
	}
	wantMeta := []string{"get configmaps/app-config", "get secrets/app-env", "get secrets/db-creds",
		"list configmaps?configmap-attacher.io/snapshot=true", "list secrets?configmap-attacher.io/snapshot=true"}
	if got := actions(mc.Actions()); !reflect.DeepEqual(got, wantMeta) {
		t.Errorf("metadata reads %v, want %v", got, wantMeta)
	}
}

func TestHistoryWithoutPinningListsNothing(t *testing.T) {
	c, kc, mc, _ := pinnedClients(t)
	f := historytest.Canary() // none of its objects exists in these clients, and none is pinned
	if _, err := History(context.Background(), c, f.Res); err != nil {
		t.Fatal(err)
	}
	if len(kc.Actions()) != 0 {
		t.Errorf("typed reads without pinning: %v", actions(kc.Actions()))
	}
	for _, a := range actions(mc.Actions()) {
		if strings.HasPrefix(a, "list") {
			t.Errorf("%s without pinned objects: needs a permission history did not need before", a)
		}
	}
}

func TestComparisonReadsTheTwoRevisionsSnapshots(t *testing.T) {
	ctx := context.Background()
	t.Run("stable against canary", func(t *testing.T) {
		c, kc, _, f := pinnedClients(t)
		cmp, err := Comparison(ctx, c, f.Res, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		h := f.History()
		snaps := []string{h.Revisions[1].Config[0].Snapshot, h.Revisions[0].Config[0].Snapshot}
		p := cmp.Pairs[0]
		if p.From.Name != snaps[0] || p.To.Name != snaps[1] || p.From.Object == nil || p.From.Object.Content == nil || p.To.Object.Content == nil {
			t.Fatalf("app-config paired %+v -> %+v, want snapshots %v with content", p.From, p.To, snaps)
		}
		if got := string(p.To.Object.Content.Data["configuration.json"]); !strings.Contains(got, "faulty") {
			t.Errorf("the canary's snapshot holds %q", got)
		}
		want := []string{"get configmaps/" + snaps[0], "get configmaps/" + snaps[1], "get configmaps/app-config",
			"get secrets/app-env", "get secrets/app-env-adcf92bbc6", "get secrets/db-creds"}
		sort.Strings(want)
		if got := actions(kc.Actions()); !reflect.DeepEqual(got, want) {
			t.Errorf("content reads %v, want %v", got, want)
		}
	})
	t.Run("live", func(t *testing.T) {
		c, _, _, f := pinnedClients(t)
		cmp, err := Comparison(ctx, c, f.Res, []int64{2}, true)
		if err != nil {
			t.Fatal(err)
		}
		p := cmp.Pairs[0]
		if cmp.From.Revision != 2 || cmp.To.Role != history.RoleLive || p.To.Name != "app-config" || !strings.Contains(string(p.To.Object.Content.Data["configuration.json"]), "v3") {
			t.Errorf("live comparison %+v: %+v -> %+v", cmp, p.From, p.To)
		}
	})
	t.Run("an unknown revision reads nothing", func(t *testing.T) {
		c, kc, mc, f := pinnedClients(t)
		if _, err := Comparison(ctx, c, f.Res, []int64{9}, true); !errors.Is(err, history.ErrUnknownRevision) {
			t.Errorf("err = %v", err)
		}
		if n := len(kc.Actions()) + len(mc.Actions()); n != 0 {
			t.Errorf("%d reads before the revision was checked", n)
		}
	})
}
