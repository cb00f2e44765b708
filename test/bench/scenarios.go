package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Helpers shared by the scenarios (job.go, controller.go, memory.go).

// freshNamespace deletes ns (left by an earlier run) and creates it again. Our in-use protection's
// finalizer would hold the ConfigMaps of a namespace being deleted while no controller runs: the
// bench takes it off itself.
func (e env) freshNamespace(ctx context.Context, ns string, keep bool) error {
	if err := e.c.DeleteNamespace(ctx, ns); err != nil {
		return err
	}
	var lastDrop time.Time
	if err := framework.Eventually(ctx, 5*time.Minute, "namespace "+ns+" deleted", func(ctx context.Context) (bool, string, error) {
		if _, err := e.c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if time.Since(lastDrop) < 2*time.Second {
			return false, "terminating", nil
		}
		lastDrop = time.Now()
		return false, "terminating", e.dropFinalizers(ctx, ns)
	}); err != nil {
		return err
	}
	return e.c.CreateNamespace(ctx, ns)
}

func (e env) dropFinalizers(ctx context.Context, ns string) error {
	cms := e.meta.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns)
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	return parallel(len(list.Items), 32, func(i int) error {
		cm := list.Items[i]
		if !api.HasFinalizer(cm.Finalizers, api.InUseFinalizer) {
			return nil
		}
		var keep []string
		for _, f := range cm.Finalizers {
			if f != api.InUseFinalizer {
				keep = append(keep, f)
			}
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": keep, "resourceVersion": cm.ResourceVersion}})
		if err != nil {
			return err
		}
		_, err = cms.Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone, or changed: the next look tries again
		}
		return err
	})
}

func readAll(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// histogram is a Prometheus histogram's cumulative bucket counts, by upper bound (-1: +Inf).
type histogram []struct{ le, count float64 }

// readHistogram reads a histogram from url, only the series whose labels contain filter.
func readHistogram(url, name, filter string) (histogram, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var h histogram
	for _, line := range strings.Split(readAll(resp), "\n") {
		if !strings.HasPrefix(line, name+"_bucket{") || !strings.Contains(line, filter) {
			continue
		}
		count, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return nil, err
		}
		bound, err := strconv.ParseFloat(between(line, `le="`, `"`), 64)
		if err != nil || math.IsInf(bound, 1) {
			bound = -1
		}
		h = append(h, struct{ le, count float64 }{bound, count})
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("no histogram %s{%s} at %s", name, filter, url)
	}
	return h, nil
}

// since is what was observed after earlier (the same histogram read before).
func (h histogram) since(earlier histogram) histogram {
	out := append(histogram(nil), h...)
	for i := range out {
		if i < len(earlier) {
			out[i].count -= earlier[i].count
		}
	}
	return out
}

// quantile is the upper bound of the first bucket holding at least fraction q of the observations
// (-1 for the +Inf bucket, 0 with no observations).
func (h histogram) quantile(q float64) time.Duration {
	total := h[len(h)-1].count
	if total == 0 {
		return 0
	}
	for _, b := range h {
		if b.count >= q*total {
			if b.le < 0 {
				return -1
			}
			return time.Duration(b.le * float64(time.Second)).Round(100 * time.Microsecond)
		}
	}
	return -1
}

// apiserverWrites reads apiserver_request_total for PATCH and PUT on configmaps, by verb and response
// code (cluster-wide).
func apiserverWrites(ctx context.Context, c *framework.Cluster) (map[[2]string]float64, error) {
	out := map[[2]string]float64{}
	err := apiserverRequests(ctx, c, func(verb, resource, code string, v float64) {
		if resource == "configmaps" && (verb == "PATCH" || verb == "PUT") {
			out[[2]string{verb, code}] += v
		}
	})
	return out, err
}

// apiserverRequests calls add for every sample of kube-apiserver's apiserver_request_total (requests
// completed; a watch counts when it ends).
func apiserverRequests(ctx context.Context, c *framework.Cluster, add func(verb, resource, code string, v float64)) error {
	return apiserverMetric(ctx, c, "apiserver_request_total", add)
}

// apiserverMetric calls add for every sample of one of kube-apiserver's metrics, by verb, resource
// and code.
func apiserverMetric(ctx context.Context, c *framework.Cluster, name string, add func(verb, resource, code string, v float64)) error {
	raw, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return err
		}
		add(between(line, `verb="`, `"`), between(line, `resource="`, `"`), between(line, `code="`, `"`), v)
	}
	return nil
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	return s[:strings.Index(s, end)]
}

// peakRSS is the process's VmHWM: the most resident memory it ever had.
func peakRSS(pid int) (int64, error) { return procStatus(pid, "VmHWM:") }

// procStatus reads a kB field of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// parallel runs f(0..n-1) with at most width at once and returns the first error.
func parallel(n, width int, f func(int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	sem := make(chan struct{}, width)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}
