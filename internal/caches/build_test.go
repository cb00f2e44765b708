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

// The Pod informer starts once the ReplicaSets are cached, however long their list takes: every pod
// then shares its owner reference and config references with its ReplicaSet.
func TestPodsArriveAfterTheirReplicaSetsAndShareWithThem(t *testing.T) {
	rs := benchReplicaSet(0)
	kc := kubefake.NewClientset(rs, benchPod(0), benchPod(1))
	// The ReplicaSets' list is slow (a large cluster's): pods started at the same time would come first.
	kc.PrependReactor("list", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
		time.Sleep(300 * time.Millisecond)
		return false, nil, nil
	})
	c, err := New(&kube.Clients{Kube: kc, Metadata: testutil.FakeMetadata()}, Options{ConfigKinds: []refs.Kind{refs.ConfigMap}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	c.Start(stop)
	if !c.WaitForSync(stop) {
		t.Fatal("caches did not sync")
	}
	ru, ok, _ := c.Users[ReplicaSet].Get(rs.Namespace, rs.Name)
	if !ok {
		t.Fatal("the ReplicaSet is not cached")
	}
	for _, p := range []string{benchPod(0).Name, benchPod(1).Name} {
		u, ok, _ := c.Users[Pod].Get(rs.Namespace, p)
		if !ok {
			t.Fatalf("pod %s is not cached", p)
		}
		if u.Owner != ru.self || unsafe.SliceData(u.Refs) != unsafe.SliceData(ru.Refs) {
			t.Errorf("pod %s keeps its own owner (%p, the ReplicaSet's %p) or references: it arrived before its ReplicaSet", p, u.Owner, ru.self)
		}
	}
}
