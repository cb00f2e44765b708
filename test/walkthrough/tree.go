package walkthrough

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	revisions "github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Tree draws what the garbage collector sees, like the Argo CD resource tree in the write-up:
// each ReplicaSet of the Rollout with the config objects whose ownerReferences point at it.
func Tree(ctx context.Context, c *framework.Cluster, ns, name string) (string, error) {
	res, err := c.Resolve(ctx, ns, name)
	if err != nil {
		return "", err
	}
	owned := map[types.UID][]string{}
	var loose []string
	cms, err := c.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	secrets, err := c.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var metas []metav1.Object
	var kinds []string
	for i := range cms.Items {
		if cms.Items[i].Name == "kube-root-ca.crt" {
			continue
		}
		metas, kinds = append(metas, &cms.Items[i]), append(kinds, "ConfigMap")
	}
	for i := range secrets.Items {
		metas, kinds = append(metas, &secrets.Items[i]), append(kinds, "Secret")
	}
	for i, m := range metas {
		label := kinds[i] + " " + m.GetName()
		if len(m.GetOwnerReferences()) == 0 {
			loose = append(loose, label)
		}
		for _, o := range m.GetOwnerReferences() {
			owned[o.UID] = append(owned[o.UID], label)
		}
	}
	var b strings.Builder
	writeRollout(&b, name, res)
	for i, rs := range res.Owned {
		indent := writeReplicaSet(&b, res, i)
		cfg := owned[rs.UID]
		sort.Strings(cfg)
		for j, label := range cfg {
			leaf := "├─"
			if j == len(cfg)-1 {
				leaf = "└─"
			}
			fmt.Fprintf(&b, "%s %s %s\n", indent, leaf, label)
		}
	}
	if len(loose) > 0 {
		sort.Strings(loose)
		fmt.Fprintf(&b, "not attached to anything: %s\n", strings.Join(loose, ", "))
	}
	return b.String(), nil
}

// writeRollout writes a tree's first line: the Rollout and its phase.
func writeRollout(b *strings.Builder, name string, res *workload.Resolved) {
	state := res.Rollout.Status.Phase
	if res.Rollout.Status.Abort {
		state = "Aborted"
	}
	fmt.Fprintf(b, "Rollout %s (%s)\n", name, strings.ToLower(state))
}

// writeReplicaSet writes the branch of the i-th ReplicaSet and returns the indent of its leaves.
func writeReplicaSet(b *strings.Builder, res *workload.Resolved, i int) string {
	rs := res.Owned[i]
	branch, indent := "├─", "│ "
	if i == len(res.Owned)-1 {
		branch, indent = "└─", "  "
	}
	fmt.Fprintf(b, "%s ReplicaSet %s (rev %d, %s, %s)\n", branch, rs.Name, revisions.Number(rs.Annotations), res.RoleOf(rs), pods(rs))
	return indent
}

func pods(rs *appsv1.ReplicaSet) string {
	n := rs.Status.ReadyReplicas
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}
