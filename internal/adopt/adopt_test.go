package adopt_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"

	"github.com/configmap-attacher/configmap-attacher/internal/adopt"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

const ns = testutil.Namespace

// helm is the metadata Helm 3 writes on what a release deploys.
func helm(release string) map[string]string {
	return map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns}
}

type config struct {
	kind        refs.Kind
	name        string
	labels      map[string]string
	annotations map[string]string
	owners      []metav1.OwnerReference
	deleting    bool
}

func (c config) meta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(c.kind)},
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: ns, UID: types.UID("uid-" + c.name),
			Labels: c.labels, Annotations: c.annotations, OwnerReferences: c.owners},
	}
	if c.deleting {
		now := metav1.Now()
		m.DeletionTimestamp = &now
		m.Finalizers = []string{"example.com/hold"}
	}
	return m
}

func spec(configMaps []string, secrets ...string) corev1.PodSpec {
	return testutil.PodSpec(configMaps, secrets...)
}

// deployment "web" of Helm release "web" with two ReplicaSets: revision 1 reads app-config-1, revision
// 2 app-config-2; both read the release's Secret app-env and another release's Secret db.
func deployment() (*appsv1.Deployment, []runtime.Object) {
	d := testutil.Deployment("web", "web-uid", spec([]string{"app-config-2"}, "app-env", "db"))
	d.Annotations = helm("web")
	rs1 := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, spec([]string{"app-config-1", "missing"}, "app-env", "db"))
	rs2 := testutil.ReplicaSet(d, workload.Deployment, "bbb", 2, spec([]string{"app-config-2"}, "app-env", "db"))
	other := testutil.ReplicaSet(testutil.Deployment("other", "other-uid", corev1.PodSpec{}), workload.Deployment, "ccc", 1, spec([]string{"app-config-1", "unrelated"}))
	return d, []runtime.Object{d, rs1, rs2, other}
}

func clients(t *testing.T, typed []runtime.Object, configs ...config) (*kube.Clients, *metafake.FakeMetadataClient) {
	t.Helper()
	var metas []runtime.Object
	for _, c := range configs {
		metas = append(metas, c.meta())
	}
	mc := testutil.FakeMetadata(metas...)
	return &kube.Clients{Kube: kubefake.NewClientset(typed...), Metadata: mc}, mc
}

func rsOwner(hash string) metav1.OwnerReference {
	no := false
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-" + hash, UID: types.UID("rs-" + hash), Controller: &no}
}

func TestRead(t *testing.T) {
	web := helm("web")
	tests := []struct {
		name        string
		configs     []config
		wantObjects []string // "Kind/name label keep usedBy..."
		wantSkipped []string
		wantErr     string
	}{
		{
			name: "the release's objects are adopted; another release's, missing ones are left alone",
			configs: []config{
				{kind: refs.ConfigMap, name: "app-config-1", annotations: web},
				{kind: refs.ConfigMap, name: "app-config-2", annotations: web},
				{kind: refs.Secret, name: "app-env", annotations: web},
				{kind: refs.Secret, name: "db", annotations: helm("db")},
			},
			wantObjects: []string{
				"ConfigMap/app-config-1 label keep web-aaa",
				"ConfigMap/app-config-2 label keep web-bbb",
				"Secret/app-env label keep web-aaa web-bbb",
			},
			wantSkipped: []string{
				"ConfigMap/missing: left alone: not found (nothing to keep)",
				"Secret/db: left alone: deployed by Helm release devops-apps-01/db, Deployment devops-apps-01/web by Helm release devops-apps-01/web: upgrading web does not delete it",
			},
		},
		{
			name: "already labelled and kept: only the ownerReferences are planned",
			configs: []config{
				{kind: refs.ConfigMap, name: "app-config-1", annotations: map[string]string{"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": ns, "helm.sh/resource-policy": "keep"},
					labels: map[string]string{"configmap-attacher.io/revisioned": "true"}},
			},
			wantObjects: []string{"ConfigMap/app-config-1 - - web-aaa"},
			wantSkipped: []string{
				"ConfigMap/app-config-2: left alone: not found (nothing to keep)",
				"ConfigMap/missing: left alone: not found (nothing to keep)",
				"Secret/app-env: left alone: not found (nothing to keep)",
				"Secret/db: left alone: not found (nothing to keep)",
			},
		},
		{
			name: "opted out, being deleted, hand-made: left alone",
			configs: []config{
				{kind: refs.ConfigMap, name: "app-config-1", annotations: web, labels: map[string]string{"configmap-attacher.io/revisioned": "false"}},
				{kind: refs.ConfigMap, name: "app-config-2", annotations: web, deleting: true},
				{kind: refs.Secret, name: "app-env"},
			},
			wantSkipped: []string{
				"ConfigMap/app-config-1: left alone: opted out (configmap-attacher.io/revisioned=false)",
				"ConfigMap/app-config-2: left alone: being deleted",
				"ConfigMap/missing: left alone: not found (nothing to keep)",
				"Secret/app-env: left alone: deployed by nothing we can tell, Deployment devops-apps-01/web by Helm release devops-apps-01/web: upgrading web does not delete it",
				"Secret/db: left alone: not found (nothing to keep)",
			},
		},
		{
			name: "another resource policy is the user's: refused before any write",
			configs: []config{
				{kind: refs.ConfigMap, name: "app-config-1", annotations: map[string]string{"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": ns, "helm.sh/resource-policy": "delete"}},
			},
			wantErr: "cannot adopt: ConfigMap devops-apps-01/app-config-1 has helm.sh/resource-policy=delete: set it to keep or remove it, then run adopt again",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, typed := deployment()
			c, mc := clients(t, typed, tt.configs...)
			p, err := adopt.Read(context.Background(), c, adopt.Workload{Kind: caches.Deployment, Namespace: ns, Name: "web"})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || !errors.Is(err, adopt.ErrInvalid) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var objs, skipped []string
			for _, o := range p.Objects {
				s := string(o.Kind) + "/" + o.Meta.Name + " " + flag(o.AddLabel, "label") + " " + flag(o.AddKeep, "keep")
				for _, r := range o.UsedBy {
					s += " " + r.Name
				}
				objs = append(objs, s)
			}
			for _, s := range p.Skipped {
				skipped = append(skipped, s.String())
			}
			if !reflect.DeepEqual(objs, tt.wantObjects) {
				t.Errorf("objects:\n got %q\nwant %q", objs, tt.wantObjects)
			}
			if !reflect.DeepEqual(skipped, tt.wantSkipped) {
				t.Errorf("skipped:\n got %q\nwant %q", skipped, tt.wantSkipped)
			}
			for _, a := range mc.Actions() {
				if a.GetVerb() != "get" {
					t.Errorf("Read wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

func flag(b bool, s string) string {
	if b {
		return s
	}
	return "-"
}

func TestReadRefuses(t *testing.T) {
	d, _ := deployment()
	tests := []struct {
		name    string
		w       adopt.Workload
		typed   []runtime.Object
		wantErr string
	}{
		{name: "no such workload", w: adopt.Workload{Kind: caches.Deployment, Namespace: ns, Name: "nope"},
			wantErr: "cannot adopt: Deployment devops-apps-01/nope not found: check the name and the namespace (-n)"},
		{name: "no revisions yet", w: adopt.Workload{Kind: caches.Deployment, Namespace: ns, Name: "web"}, typed: []runtime.Object{d},
			wantErr: "cannot adopt: Deployment devops-apps-01/web has no revisions yet: wait until its controller has created them, then run adopt again"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := clients(t, tt.typed)
			_, err := adopt.Read(context.Background(), c, tt.w)
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, adopt.ErrInvalid) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// The whole adoption on a fake API server: labels, keep and ownerReferences added; the foreign owner
// kept; a second run changes nothing.
func TestApply(t *testing.T) {
	web := helm("web")
	foreign := metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "App", Name: "mine", UID: "foreign-uid"}
	_, typed := deployment()
	c, mc := clients(t, typed,
		config{kind: refs.ConfigMap, name: "app-config-1", annotations: web, owners: []metav1.OwnerReference{foreign}},
		config{kind: refs.ConfigMap, name: "app-config-2", annotations: web, owners: []metav1.OwnerReference{rsOwner("bbb")}},
		config{kind: refs.Secret, name: "app-env", annotations: web},
		config{kind: refs.Secret, name: "db", annotations: helm("db")},
	)
	ctx := context.Background()
	w := adopt.Workload{Kind: caches.Deployment, Namespace: ns, Name: "web"}
	writer := &attach.Writer{Client: mc}

	sum, out := adoptOnce(t, c, writer, w)
	if want := (adopt.Summary{Objects: 3, Changes: 9}); sum != want {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}
	wantOut := `ConfigMap devops-apps-01/app-config-1: add label configmap-attacher.io/revisioned=true
ConfigMap devops-apps-01/app-config-1: add annotation helm.sh/resource-policy=keep
ConfigMap devops-apps-01/app-config-2: add label configmap-attacher.io/revisioned=true
ConfigMap devops-apps-01/app-config-2: add annotation helm.sh/resource-policy=keep
Secret devops-apps-01/app-env: add label configmap-attacher.io/revisioned=true
Secret devops-apps-01/app-env: add annotation helm.sh/resource-policy=keep
ConfigMap devops-apps-01/app-config-1: add ownerReference to ReplicaSet web-aaa (revision 1) (uid rs-aaa)
Secret devops-apps-01/app-env: add ownerReference to ReplicaSet web-aaa (revision 1) (uid rs-aaa)
Secret devops-apps-01/app-env: add ownerReference to ReplicaSet web-bbb (revision 2) (uid rs-bbb)
`
	if out.String() != wantOut {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), wantOut)
	}

	no := false
	rs := func(hash string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-" + hash, UID: types.UID("rs-" + hash), Controller: &no}
	}
	want := map[string][]metav1.OwnerReference{
		"configmaps/app-config-1": {foreign, rs("aaa")},
		"configmaps/app-config-2": {rs("bbb")},
		"secrets/app-env":         {rs("aaa"), rs("bbb")},
		"secrets/db":              nil,
	}
	for key, owners := range want {
		kind, name, _ := strings.Cut(key, "/")
		gvr := refs.ConfigMap.GVR()
		if kind == "secrets" {
			gvr = refs.Secret.GVR()
		}
		m, err := mc.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := m.OwnerReferences
		sort.Slice(got, func(i, j int) bool { return got[i].UID < got[j].UID })
		sort.Slice(owners, func(i, j int) bool { return owners[i].UID < owners[j].UID })
		if !reflect.DeepEqual(got, owners) {
			t.Errorf("%s ownerReferences = %+v, want %+v", key, got, owners)
		}
		adopted := name != "db"
		if (m.Labels["configmap-attacher.io/revisioned"] == "true") != adopted || (m.Annotations["helm.sh/resource-policy"] == "keep") != adopted {
			t.Errorf("%s labels %v annotations %v; adopted: %v", key, m.Labels, m.Annotations, adopted)
		}
		if m.Annotations["meta.helm.sh/release-name"] == "" {
			t.Errorf("%s lost Helm's annotations: %v", key, m.Annotations)
		}
	}

	t.Run("again: a no-op", func(t *testing.T) {
		mc.ClearActions()
		sum, out := adoptOnce(t, c, writer, w)
		if sum != (adopt.Summary{}) || out.Len() != 0 {
			t.Errorf("second run: %+v, output %q", sum, out.String())
		}
		for _, a := range mc.Actions() {
			if a.GetVerb() != "get" {
				t.Errorf("second run wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
			}
		}
	})
}

// A StatefulSet's revisions are its ControllerRevisions: the config is tied to them.
func TestApplyStatefulSet(t *testing.T) {
	yes := true
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, UID: "sts-uid"}}
	cr := func(name string, number int64, s corev1.PodSpec) *appsv1.ControllerRevision {
		raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": s, "$patch": "replace"}}})
		if err != nil {
			t.Fatal(err)
		}
		return &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("cr-" + name),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts-uid", Controller: &yes}}},
			Revision: number, Data: runtime.RawExtension{Raw: raw},
		}
	}
	c, mc := clients(t, []runtime.Object{sts, cr("db-1", 1, spec([]string{"db-config"})), cr("db-2", 2, spec([]string{"db-config"}))},
		config{kind: refs.ConfigMap, name: "db-config"})
	ctx := context.Background()
	adoptOnce(t, c, &attach.Writer{Client: mc}, adopt.Workload{Kind: caches.StatefulSet, Namespace: ns, Name: "db"})
	m, err := mc.Resource(refs.ConfigMap.GVR()).Namespace(ns).Get(ctx, "db-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range m.OwnerReferences {
		got = append(got, o.Kind+"/"+o.Name+"/"+string(o.UID))
	}
	sort.Strings(got)
	if want := []string{"ControllerRevision/db-1/cr-db-1", "ControllerRevision/db-2/cr-db-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ownerReferences = %v, want %v", got, want)
	}
}

// adoptOnce reads and applies, as the command does, and returns the summary and the output.
func adoptOnce(t *testing.T, c *kube.Clients, w *attach.Writer, wl adopt.Workload) (adopt.Summary, *bytes.Buffer) {
	t.Helper()
	ctx := context.Background()
	p, err := adopt.Read(ctx, c, wl)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := adopt.Apply(ctx, w, p, false, &out)
	if err != nil {
		t.Fatal(err)
	}
	return sum, &out
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]caches.Kind{"deploy": caches.Deployment, "ro": caches.Rollout, "sts": caches.StatefulSet, "DaemonSets": caches.DaemonSet} {
		if got, err := adopt.ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := adopt.ParseKind("job"); err == nil || !strings.Contains(err.Error(), "deployment, rollout, statefulset or daemonset") {
		t.Errorf("ParseKind(job) = %v", err)
	}
}
