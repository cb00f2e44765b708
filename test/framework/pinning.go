package framework

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Zero-touch pinning: the user keeps one ConfigMap (app-config), changes it in place with the usual
// checksum annotation on the pod template, and pods read their revision's snapshot.

// Free loopback ports are taken from below the kernel's ephemeral range (32768 and up by default) and
// below the ranges the cluster scripts pick from (Argo CD from 10000, Argo Rollouts from 20000, Flux
// from 30000).
const freePortsFrom, freePortsTo = 7000, 10000

// FreeLoopbackPort returns a port nothing listens on at 127.0.0.1 right now, for a server the caller
// starts a moment later. Not one of the kernel's ephemeral ports: released here, such a port may be
// taken before the caller binds it by any bind to port 0 (a controller's probe server took one so) or
// by any outgoing connection's source port. It starts at a random port, so that tests asking at once
// seldom try the same one.
func FreeLoopbackPort() (int, error) {
	n := freePortsTo - freePortsFrom
	start := rand.IntN(n)
	for i := range n {
		p := freePortsFrom + (start+i)%n
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use
		}
		if err := ln.Close(); err != nil {
			return 0, err
		}
		return p, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 in %d..%d", freePortsFrom, freePortsTo-1)
}

// EnablePinning labels the namespace configmap-attacher.io/pinning=enabled.
func (c *Cluster) EnablePinning(ctx context.Context, ns string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, api.PinningNamespaceLabel, api.PinningEnabled)
	_, err := c.Kube.CoreV1().Namespaces().Patch(ctx, ns, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// PutPinnedConfigMap creates the static ConfigMap, labelled configmap-attacher.io/pin, or changes
// its data in place.
func (c *Cluster) PutPinnedConfigMap(ctx context.Context, ns, name string, data map[string]string) error {
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{api.PinLabel: api.PinValue}}, Data: data}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cm.Data = data
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// Checksum is the annotation a chart puts on its pod template so a config change rolls the pods
// (Helm's documented practice): sha256 of the data.
func Checksum(data map[string]string) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PinnedTemplate is PodTemplate reading configMaps, with the checksum annotation of data.
func PinnedTemplate(app string, configMaps []string, data map[string]string) corev1.PodTemplateSpec {
	t := PodTemplate(app, configMaps, nil)
	t.Annotations = map[string]string{"checksum/config": Checksum(data)}
	return t
}

// SnapshotOf returns the snapshot of the object named original that the revision with uid owns.
func (c *Cluster) SnapshotOf(ctx context.Context, ns, original string, revision types.UID) (*corev1.ConfigMap, error) {
	list, err := c.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: api.SnapshotLabel + "=" + api.SnapshotValue})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		s := &list.Items[i]
		if s.Annotations[api.OriginalNameAnnotation] != original {
			continue
		}
		for _, o := range s.OwnerReferences {
			if o.UID == revision {
				return s, nil
			}
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), "snapshot of "+original+" for "+string(revision))
}

// Snapshots lists the snapshots of the object named original in ns.
func (c *Cluster) Snapshots(ctx context.Context, ns, original string) ([]corev1.ConfigMap, error) {
	list, err := c.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: api.SnapshotLabel + "=" + api.SnapshotValue})
	if err != nil {
		return nil, err
	}
	var out []corev1.ConfigMap
	for _, s := range list.Items {
		if s.Annotations[api.OriginalNameAnnotation] == original {
			out = append(out, s)
		}
	}
	return out, nil
}

// ReadsConfigMaps lists the ConfigMaps a pod's spec references, sorted, but kube-root-ca.crt, which
// the ServiceAccount admission plugin projects into every pod with a service account token.
func ReadsConfigMaps(p *corev1.Pod) []string {
	var out []string
	for _, r := range refs.FromPodSpec(&p.Spec).Sorted() {
		if r.Kind == refs.ConfigMap && r.Name != "kube-root-ca.crt" {
			out = append(out, r.Name)
		}
	}
	return out
}

// DescribePods is "pod: configmaps" per pod, for failure messages.
func DescribePods(pods []corev1.Pod) string {
	var s []string
	for i := range pods {
		s = append(s, pods[i].Name+": "+strings.Join(ReadsConfigMaps(&pods[i]), ","))
	}
	return strings.Join(s, "; ")
}
