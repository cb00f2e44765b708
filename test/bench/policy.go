package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Pinning by the API server (-pinning-admission=policy), beside the webhook in the webhook scenario.

const benchPolicy = "bench-policy"

// startPolicy runs our controller with -pinning -pinning-admission=policy on the namespaces and waits
// until it is ready, its admission policies are applied and every namespace has its PinTable. stop
// stops it and deletes the policies.
func (e env) startPolicy(ctx context.Context, namespaces ...string) (*framework.Process, string, func(), error) {
	if err := e.c.EnsurePinTableCRD(ctx, e.root); err != nil {
		return nil, "", nil, err
	}
	probe, err := freeAddr()
	if err != nil {
		return nil, "", nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, "", nil, err
	}
	args := append([]string{"controller", "-leader-elect=false", "-namespaces", strings.Join(namespaces, ","),
		"-metrics-bind-address", metricsAddr, "-health-probe-bind-address", probe,
		"-pinning", "-pinning-admission=policy", "-webhook-configuration-name=" + benchPolicy}, e.controllerFlags...)
	p, err := e.bin.Start(ctx, []string{"LOG_LEVEL=warn"}, args...)
	if err != nil {
		return nil, "", nil, err
	}
	stop := func() {
		_ = p.Stop()
		_ = policy.DeletePolicies(context.Background(), e.c.Kube, benchPolicy)
	}
	err = framework.Eventually(ctx, 2*time.Minute, "controller ready, admission policies applied, PinTables made", func(ctx context.Context) (bool, string, error) {
		if ok, why, err := ready(p, probe); !ok || err != nil {
			return false, why, err
		}
		if _, err := e.c.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, benchPolicy, metav1.GetOptions{}); err != nil {
			return false, "no binding yet", nil
		}
		for _, ns := range namespaces {
			if _, err := e.c.PinTable(ctx, ns); err != nil {
				return false, "no PinTable in " + ns + " yet", nil
			}
		}
		return true, "", nil
	})
	if err == nil {
		for _, ns := range namespaces {
			if err = e.c.WaitPolicyEffective(ctx, ns); err != nil {
				break
			}
		}
	}
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	return p, "http://" + metricsAddr + "/metrics", stop, nil
}

// waitEntry waits until the namespace's PinTable has (present) or no longer has the entry key.
func (e env) waitEntry(ctx context.Context, ns, key string, present bool) error {
	return e.waitEntries(ctx, ns, []string{key}, present)
}

func (e env) waitEntries(ctx context.Context, ns string, keys []string, present bool) error {
	what := "entries in the PinTable"
	if !present {
		what = "entries gone from the PinTable"
	}
	return framework.Eventually(ctx, 2*time.Minute, fmt.Sprintf("%d %s of %s", len(keys), what, ns), func(ctx context.Context) (bool, string, error) {
		t, err := e.c.PinTable(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		n := 0
		for _, k := range keys {
			if _, ok := t.Spec.Revisions[k]; ok == present {
				n++
			}
		}
		return n == len(keys), fmt.Sprintf("%d of %d", n, len(keys)), nil
	})
}

// tableWrites counts the PinTable writes a revision costs, from the controller's
// configmap_attacher_pin_table_writes_total: revisions appearing and going one at a time (each its
// own entry, then its removal), then a burst appearing at once and going at once (the namespace's
// table is written whole, so a burst shares writes).
func (e env) tableWrites(ctx context.Context, ns, metricsURL string) error {
	zero := int32(0)
	tmpl := framework.PodTemplate("writes", []string{"app-config"}, nil)
	create := func(name string) (*appsv1.ReplicaSet, error) {
		return e.c.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
		}, metav1.CreateOptions{})
	}
	measure := func(what string, n int, run func() error) error {
		before, err := counterSum(metricsURL, "configmap_attacher_pin_table_writes_total")
		if err != nil {
			return err
		}
		if err := run(); err != nil {
			return err
		}
		after, err := counterSum(metricsURL, "configmap_attacher_pin_table_writes_total")
		if err != nil {
			return err
		}
		fmt.Printf("PinTable writes, %s: %.0f for %d revisions, %.2f per revision (its entry written, then removed)\n", what, after-before, n, (after-before)/float64(n))
		return nil
	}
	const one, burst = 10, 100
	if err := measure("revisions one at a time", one, func() error {
		for i := range one {
			rs, err := create(fmt.Sprintf("one-%02d", i))
			if err != nil {
				return err
			}
			if err := e.waitEntry(ctx, ns, string(rs.UID), true); err != nil {
				return err
			}
			if err := e.c.Kube.AppsV1().ReplicaSets(ns).Delete(ctx, rs.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			if err := e.waitEntry(ctx, ns, string(rs.UID), false); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	return measure(fmt.Sprintf("a burst of %d revisions created at once, then deleted at once", burst), burst, func() error {
		keys := make([]string, burst)
		names := make([]string, burst)
		if err := parallel(burst, 32, func(i int) error {
			rs, err := create(fmt.Sprintf("burst-%03d", i))
			if err != nil {
				return err
			}
			keys[i], names[i] = string(rs.UID), rs.Name
			return nil
		}); err != nil {
			return err
		}
		if err := e.waitEntries(ctx, ns, keys, true); err != nil {
			return err
		}
		if err := parallel(burst, 32, func(i int) error {
			return e.c.Kube.AppsV1().ReplicaSets(ns).Delete(ctx, names[i], metav1.DeleteOptions{})
		}); err != nil {
			return err
		}
		return e.waitEntries(ctx, ns, keys, false)
	})
}

// ready reports whether the process p (ours or a peer) runs and answers ready at its probe address.
func ready(p *framework.Process, probe string) (bool, string, error) {
	if p.Exited() {
		return false, "", fmt.Errorf("exited: %s", tail(p.Logs(), 20))
	}
	resp, err := http.Get("http://" + probe + "/readyz")
	if err != nil {
		return false, err.Error(), nil
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status, nil
}
