package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// uninstall: the resident memory of our controller while in-use protection releases objects opted-in
// ConfigMaps of one namespace deleted at once (what an uninstall does), in a namespace of pods Pods
// none of which reads them. The caches say "unused" for each, so each release waits for the live read
// of the namespace (protection's double check): before it was paged and shared, every deletion read
// the namespace's Pods whole, up to one per protection worker at once. Each build (ours, and the
// baseline build if given, e.g. main's) runs alone, in turn, with objects of its own, rounds times.
func (e env) uninstall(ctx context.Context, objects, pods, rounds int, timeout time.Duration, keep bool) error {
	const ns = "bench-uninstall"
	if err := e.freshNamespace(ctx, ns, keep); err != nil {
		return err
	}
	cleanup, err := e.createPods(ctx, ns, pods)
	if cleanup != nil && !keep {
		defer cleanup()
	}
	if err != nil {
		return err
	}
	type build struct {
		name, set string // set names its objects
		bin       framework.Binary
	}
	builds := []build{{"ours", "ours", e.bin}}
	if e.baseline.Path != "" {
		builds = append(builds, build{baselineName, "baseline", e.baseline})
	}
	table := [][]string{{"build, round", "RSS before", "peak RSS while releasing", "released in", "Pod LISTs (pages)"}}
	for r := range rounds {
		for _, b := range builds {
			row, err := e.uninstallOnce(ctx, ns, fmt.Sprintf("%s-%d", b.set, r), b.bin, objects, timeout)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", b.name, r+1, err)
			}
			row = append([]string{fmt.Sprintf("%s, %d", b.name, r+1)}, row...)
			fmt.Println(strings.Join(row, "  |  "))
			table = append(table, row)
		}
	}
	fmt.Printf("\n%d opted-in ConfigMaps deleted at once in a namespace of %d Pods (load average %s):\n\n", objects, pods, loadAverage())
	for i, r := range table {
		fmt.Println("| " + strings.Join(r, " | ") + " |")
		if i == 0 {
			fmt.Println("|" + strings.Repeat(" --- |", len(r)))
		}
	}
	return nil
}

// uninstallOnce starts bin on ns, makes objects opted-in ConfigMaps labelled set, waits until each
// carries our finalizer and the process has settled, then deletes them at once and measures until the
// last is gone, or timeout: the process's peak RSS from the deletion on (VmHWM, reset just before),
// the time, and the Pod LISTs kube-apiserver served meanwhile. What a build did not release by then
// is released by the bench, after the measurement.
func (e env) uninstallOnce(ctx context.Context, ns, set string, bin framework.Binary, objects int, timeout time.Duration) ([]string, error) {
	p, err := e.startController(ctx, bin, "-namespaces", ns)
	if err != nil {
		return nil, err
	}
	defer func() { _ = p.Stop() }()
	selector := "bench-uninstall=" + set
	if err := parallel(objects, 32, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rel-%s-%05d", set, i), Namespace: ns,
			Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue, "bench-uninstall": set}}, Data: map[string]string{"k": "v"}}
		_, err := e.c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	cms := e.meta.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns)
	if err := framework.Eventually(ctx, 10*time.Minute, "every ConfigMap protected", func(ctx context.Context) (bool, string, error) {
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, "", err
		}
		n := 0
		for _, m := range list.Items {
			if api.HasFinalizer(m.Finalizers, api.InUseFinalizer) {
				n++
			}
		}
		return n == objects, fmt.Sprintf("%d of %d", n, objects), nil
	}); err != nil {
		return nil, err
	}
	settle(ctx, p.Pid())
	before, err := currentRSS(p.Pid())
	if err != nil {
		return nil, err
	}
	// The peak from here on: VmHWM starts again from the current RSS.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.Pid()), []byte("5"), 0); err != nil {
		return nil, fmt.Errorf("resetting the peak RSS: %w", err)
	}
	lists := func() (float64, error) {
		n := 0.0
		err := apiserverRequests(ctx, e.c, func(verb, resource, _ string, v float64) {
			if verb == "LIST" && resource == "pods" {
				n += v
			}
		})
		return n, err
	}
	listsBefore, err := lists()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		return nil, err
	}
	left := func(ctx context.Context) (int, error) {
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return 0, err
		}
		return len(list.Items), nil
	}
	err = framework.Eventually(ctx, timeout, "every ConfigMap released", func(ctx context.Context) (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("the controller exited:\n%s", tail(p.Logs(), 20))
		}
		n, err := left(ctx)
		return n == 0, fmt.Sprintf("%d left", n), err
	})
	remaining, lerr := left(ctx)
	if lerr != nil {
		return nil, lerr
	}
	if err != nil && remaining == 0 {
		return nil, err
	}
	took := time.Since(start)
	peak, err := peakRSS(p.Pid())
	if err != nil {
		return nil, err
	}
	listsAfter, err := lists()
	if err != nil {
		return nil, err
	}
	released := took.Round(100 * time.Millisecond).String()
	if remaining > 0 {
		released = fmt.Sprintf("%d of %d in %s", objects-remaining, objects, timeout)
		_ = p.Stop()
		if err := framework.Eventually(ctx, 10*time.Minute, "the rest released by the bench", func(ctx context.Context) (bool, string, error) {
			if err := e.dropFinalizers(ctx, ns); err != nil {
				return false, "", err
			}
			n, err := left(ctx)
			return n == 0, fmt.Sprintf("%d left", n), err
		}); err != nil {
			return nil, err
		}
	}
	return []string{fmt.Sprintf("%.1f MiB", float64(before)/(1<<20)), fmt.Sprintf("%.1f MiB", float64(peak)/(1<<20)),
		released, fmt.Sprintf("%.0f", listsAfter-listsBefore)}, nil
}
