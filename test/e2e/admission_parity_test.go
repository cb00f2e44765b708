//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The mutating policy rewrites exactly what the reference table lists, on pod specs nobody here
// wrote: every pod spec of the public charts the renderer is tested on (internal/render/testdata),
// each the template of a ReplicaSet whose every ConfigMap and Secret is pinned. A server-side dry run
// of a pod of each: every name in its volumes and env now names the ReplicaSet's snapshot of it, as
// the API server lists the snapshots (not as the table says); image pull Secrets keep their names.
func TestPolicyRewritesWhatTheReferenceTableListsOnPublicCharts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "pol-parity")
	startPolicyController(t, nil, ns)

	type fixture struct {
		from string
		spec corev1.PodSpec
		rs   *appsv1.ReplicaSet
	}
	var fixtures []fixture
	objects := map[refs.Ref]bool{}
	seen := map[string]bool{}
	for _, c := range testutil.ChartPodSpecs(t) {
		if seen[string(c.JSON)] {
			continue
		}
		seen[string(c.JSON)] = true
		var spec corev1.PodSpec
		must(t, json.Unmarshal(c.JSON, &spec))
		// What admission needs to exist besides config is not what this story is about.
		spec.PriorityClassName, spec.RuntimeClassName, spec.NodeName, spec.SchedulingGates = "", nil, "", nil
		spec.RestartPolicy = corev1.RestartPolicyAlways // a Job's or CronJob's spec, as a ReplicaSet's template
		withVolumesMounted(&spec)
		uses := 0
		for _, u := range refs.Uses(&spec) {
			objects[u.Ref] = true
			if u.Path.InVolumesOrEnv() {
				uses++
			}
		}
		if uses > 0 {
			fixtures = append(fixtures, fixture{from: c.From, spec: spec})
		}
	}
	for r := range objects {
		meta := metav1.ObjectMeta{Name: r.Name, Labels: map[string]string{api.PinLabel: api.PinValue}}
		var err error
		if r.Kind == refs.Secret {
			_, err = e2e.cluster.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"k": r.Name}}, metav1.CreateOptions{})
		} else {
			_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": r.Name}}, metav1.CreateOptions{})
		}
		must(t, err)
	}
	accounts := map[string]bool{}
	for i := range fixtures {
		f := &fixtures[i]
		if sa := f.spec.ServiceAccountName; sa != "" && !accounts[sa] {
			accounts[sa] = true
			_, err := e2e.cluster.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				must(t, err)
			}
		}
		labels := map[string]string{"parity": fmt.Sprintf("spec-%d", i)}
		rs, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("spec-%d", i)},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: f.spec}},
		}, metav1.CreateOptions{})
		mustFor(t, err, f.from)
		f.rs = rs
	}
	t.Logf("given: %d pod specs of public charts, each the template of a ReplicaSet; %d ConfigMaps and Secrets they name, all pinned", len(fixtures), len(objects))
	must(t, framework.Eventually(ctx, 2*time.Minute, "an entry for every ReplicaSet", func(ctx context.Context) (bool, string, error) {
		table, err := e2e.cluster.PinTable(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		n := 0
		for _, f := range fixtures {
			if _, ok := table.Spec.Revisions[string(f.rs.UID)]; ok {
				n++
			}
		}
		return n == len(fixtures), fmt.Sprintf("%d of %d", n, len(fixtures)), nil
	}))

	rewritten := 0
	for _, f := range fixtures {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: f.rs.Name + "-", Labels: f.rs.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: f.rs.Name, UID: f.rs.UID, Controller: ptr.To(true)}}},
			Spec: f.spec}
		out, err := e2e.cluster.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		mustFor(t, err, f.from)
		var got map[string]any
		b, err := json.Marshal(out.Spec)
		must(t, err)
		must(t, json.Unmarshal(b, &got))
		for _, u := range refs.Uses(&f.spec) {
			name, _ := u.Path.In(got).(string)
			want := u.Name
			if u.Path.InVolumesOrEnv() {
				snap, err := snapshotOfKind(ctx, ns, u.Kind, u.Name, f.rs)
				mustFor(t, err, f.from)
				want = snap
				rewritten++
			}
			if name != want {
				t.Errorf("%s: %s reads %q after admission, want %q", f.from, u.Path, name, want)
			}
		}
	}
	t.Logf("then: %d references in %d pod specs rewritten to their revision's snapshots, nothing else", rewritten, len(fixtures))
}

// snapshotOfKind is the snapshot of the ConfigMap or Secret original the revision owns, listed from
// the API server.
func snapshotOfKind(ctx context.Context, ns string, kind refs.Kind, original string, rs *appsv1.ReplicaSet) (string, error) {
	if kind == refs.ConfigMap {
		s, err := e2e.cluster.SnapshotOf(ctx, ns, original, rs.UID)
		if err != nil {
			return "", err
		}
		return s.Name, nil
	}
	list, err := e2e.cluster.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: api.SnapshotLabel + "=" + api.SnapshotValue})
	if err != nil {
		return "", err
	}
	for _, s := range list.Items {
		if s.Annotations[api.OriginalNameAnnotation] != original {
			continue
		}
		for _, o := range s.OwnerReferences {
			if o.UID == rs.UID {
				return s.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no snapshot of Secret %s owned by %s", original, rs.Name)
}

func mustFor(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// withVolumesMounted adds an emptyDir for every volume a container mounts that the spec does not have
// (a StatefulSet's volumeClaimTemplates give them), so that the spec is a valid pod's.
func withVolumesMounted(spec *corev1.PodSpec) {
	have := map[string]bool{}
	for _, v := range spec.Volumes {
		have[v.Name] = true
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if !have[m.Name] {
				have[m.Name] = true
				spec.Volumes = append(spec.Volumes, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			}
		}
	}
}
