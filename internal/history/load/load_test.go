package load

import (
	"context"
	"errors"
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
	scheme := metafake.NewTestScheme()
	_ = metav1.AddMetaToScheme(scheme)
	kc := kubefake.NewClientset(cm, sec)
	c := &kube.Clients{Kube: kc, Metadata: metafake.NewSimpleMetadataClient(scheme, metaOf(refs.ConfigMap, cm.ObjectMeta), metaOf(refs.Secret, sec.ObjectMeta))}
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
