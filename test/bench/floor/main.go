// Command floor is the benchmark's lower bound for attaching: the least a watcher can do to give a
// ConfigMap an ownerReference to a new ReplicaSet. It watches ReplicaSets in one namespace and, the
// moment an ADDED event arrives, sends one strategic merge patch per ConfigMap the pod template names
// (only those whose name starts with -prefix), each in its own goroutine: the same single reference
// (controller: false, no blockOwnerDeletion) the controller writes, through the metadata client,
// without a resourceVersion. No cache beyond the watch itself, no queue, no planning, no Events, no
// client-side rate limit. The controller scenario of test/bench runs it in the same storm as
// configmap-attacher, on a parallel set of ConfigMaps, so their latencies compare side by side.
//
// It is a benchmark tool only: it checks nothing, and would happily attach to an old ReplicaSet or
// patch the same object twice.
//
//	floor -namespace bench-ctl -prefix floor-     (KUBECONFIG names the cluster)
//
// On SIGUSR1 and on SIGTERM it prints one line: "floor: patched N ConfigMaps, E errors".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
)

func main() {
	ns := flag.String("namespace", "", "namespace to watch")
	prefix := flag.String("prefix", "floor-", "attach only ConfigMaps whose name starts with this")
	logPatches := flag.Bool("log-patches", false, "print \"patched NAME RS-UID UNIX-NANOS\" when each patch returns")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var ok, failed atomic.Int64
	report := func() { fmt.Printf("floor: patched %d ConfigMaps, %d errors\n", ok.Load(), failed.Load()) }
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			report()
		}
	}()
	err := run(ctx, *ns, *prefix, *logPatches, &ok, &failed)
	report()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, ns, prefix string, logPatches bool, ok, failed *atomic.Int64) error {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return err
	}
	cfg.QPS = -1 // no client-side rate limit
	cfg.UserAgent = "bench-floor"
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	attach := func(rs *appsv1.ReplicaSet) {
		for _, name := range configMaps(&rs.Spec.Template.Spec, prefix) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := patch(ctx, mc, rs, name); err != nil {
					failed.Add(1)
					fmt.Fprintf(os.Stderr, "floor: %s -> %s: %v\n", name, rs.Name, err)
					return
				}
				ok.Add(1)
				if logPatches {
					fmt.Printf("patched %s %s %d\n", name, rs.UID, time.Now().UnixNano())
				}
			}()
		}
	}

	rss := kc.AppsV1().ReplicaSets(ns)
	list, err := rss.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		attach(&list.Items[i])
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return rss.Watch(ctx, o)
		},
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, open := <-w.ResultChan():
			if !open {
				return fmt.Errorf("watch closed")
			}
			if rs, isRS := ev.Object.(*appsv1.ReplicaSet); isRS && ev.Type == watch.Added {
				attach(rs)
			}
		}
	}
}

// patch adds the one reference configmap-attacher writes, merged by uid with any others.
func patch(ctx context.Context, mc metadata.Interface, rs *appsv1.ReplicaSet, name string) error {
	no := false
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &no,
	}}}})
	if err != nil {
		return err
	}
	_, err = mc.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(rs.Namespace).
		Patch(ctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{})
	return err
}

// configMaps lists the ConfigMaps a pod spec names with the prefix: volumes (plain and projected),
// envFrom and env of every container.
func configMaps(spec *corev1.PodSpec, prefix string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if strings.HasPrefix(n, prefix) && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			add(v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add(s.ConfigMap.Name)
				}
			}
		}
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				add(e.ConfigMapRef.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				add(e.ValueFrom.ConfigMapKeyRef.Name)
			}
		}
	}
	return out
}
