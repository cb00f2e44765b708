package caches

import (
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

// Every informer starts at once, and pods share their controller's identity and config references
// whichever of them the API server lists first: a large cluster's ReplicaSets may come long before or
// after its pods.
func TestPodsShareWithTheirReplicaSetWhicheverArrivesFirst(t *testing.T) {
	for _, slow := range []string{"replicasets", "pods"} {
		t.Run(slow+" listed last", func(t *testing.T) {
			rs := benchReplicaSet(0)
			kc := kubefake.NewClientset(rs, benchPod(0), benchPod(1))
			kc.PrependReactor("list", slow, func(k8stesting.Action) (bool, runtime.Object, error) {
				time.Sleep(300 * time.Millisecond)
				return false, nil, nil
			})
			c, err := New(&kube.Clients{Kube: kc, Metadata: testutil.FakeMetadata()}, Options{ConfigKinds: []refs.Kind{refs.ConfigMap}})
			if err != nil {
				t.Fatal(err)
			}
			c.Start(t.Context())
			if !c.WaitForSync(t.Context().Done()) {
				t.Fatal("caches did not sync")
			}
			stored, ok := c.Users[ReplicaSet].stored(rs.Namespace + "/" + rs.Name)
			if !ok {
				t.Fatal("the ReplicaSet is not cached")
			}
			id := stored.(*entry).id
			for _, p := range []string{benchPod(0).Name, benchPod(1).Name} {
				u, ok, _ := c.Users[Pod].Get(rs.Namespace, p)
				stub, _ := c.Users[Pod].stored(rs.Namespace + "/" + p)
				if !ok {
					t.Fatalf("pod %s is not cached", p)
				}
				if stub.(*podStub).owner != id || stub.(*podStub).own != nil || len(u.Refs) != 3 || u.Owner.UID != rs.UID {
					t.Errorf("pod %s keeps its own owner (%+v) or references (%v)", p, u.Owner, u.Refs)
				}
			}
			if e := stored.(*entry); unsafe.StringData(string(e.refs)) != unsafe.StringData(string(id.refs)) {
				t.Errorf("the ReplicaSet keeps references %q of its own", e.refs)
			}
		})
	}
}
