package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// What the config trigger's widened config cache costs (docs/config-starts.md, "The config cache"):
// with -reloader-annotations (the trigger's switch), the controller watches every ConfigMap and Secret
// of the cluster, metadata only, instead of the opted-in ones, and reads the data of an object a
// workload follows. The memory scenario then runs our controller three ways side by side: as before
// (no -pinning: label-filtered), with -pinning (pinning alone: still label-filtered) and with
// -pinning -reloader-annotations (widened); after the labelled ConfigMaps it
// adds objects nobody labelled — ConfigMaps and Helm release Secrets, the most common unlabelled
// objects of a cluster — and then Deployments carrying Reloader's annotation, each following one of
// those ConfigMaps.

// triggerObjects are the memory scenario's unlabelled objects and Reloader-annotated workloads (0: none).
type triggerObjects struct {
	unlabelled, annotated int
}

func (t triggerObjects) on() bool { return t.unlabelled > 0 || t.annotated > 0 }

// oursForMemory is our controller as the memory scenario runs it: with the trigger's objects, also
// with -pinning and with -pinning -reloader-annotations, each registering its webhook at a port
// of its own under a configuration of its own (the namespace is not labelled for pinning: the API
// server never calls them). cleanup deletes those configurations and their certificate Secrets.
func (e env) oursForMemory() (procs []*memProc, cleanup func()) {
	procs = []*memProc{{name: ours, start: func(ctx context.Context) (*framework.Process, error) { return e.startOurs(ctx) }}}
	if !e.triggerObjects.on() {
		return procs, func() {}
	}
	var names []string
	for _, v := range []struct{ label, name string }{
		{" -pinning", "bench-mem-pinning"},
		{" -pinning -reloader-annotations", "bench-mem-trigger"},
	} {
		names = append(names, v.name)
		procs = append(procs, &memProc{name: ours + v.label, start: func(ctx context.Context) (*framework.Process, error) {
			hook, err := freeAddr()
			if err != nil {
				return nil, err
			}
			args := append([]string{"-pinning", "-pinning-admission=webhook", "-webhook-url=https://" + hook, "-webhook-configuration-name=" + v.name}, strings.Fields(v.label)[1:]...)
			return e.startOurs(ctx, args...)
		}})
	}
	return procs, func() {
		bg := context.Background()
		for _, n := range names {
			_ = e.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(bg, n, metav1.DeleteOptions{})
			_ = e.c.Kube.CoreV1().Secrets("kube-system").Delete(bg, n+"-webhook-tls", metav1.DeleteOptions{})
		}
	}
}

// memoryTrigger adds the unlabelled objects, then the annotated Deployments, each followed by a row
// once they arrived through the watches and one after every process started anew with them present.
func (e env) memoryTrigger(ctx context.Context, ns string, size int, row func(string) error, restart func() error) error {
	t := e.triggerObjects
	measure := func(what string) error {
		if err := row(what + ", arrived through the watch"); err != nil {
			return err
		}
		if err := restart(); err != nil {
			return err
		}
		return row(what + ", started with them present (initial LIST)")
	}
	if t.unlabelled > 0 {
		fmt.Printf("creating %d unlabelled ConfigMaps of %d KiB and %d Helm release Secrets of %d KiB...\n", t.unlabelled, size/1024, t.unlabelled, size/2048)
		start := time.Now()
		payload, release := strings.Repeat("y", size), strings.Repeat("z", size/2)
		if err := parallel(t.unlabelled, 32, func(i int) error {
			if _, err := e.c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("plain-%05d", i), Labels: map[string]string{"app.kubernetes.io/name": "plain"}},
				Data:       map[string]string{"data": payload},
			}, metav1.CreateOptions{}); err != nil {
				return err
			}
			// As Helm 3 and 4 store a release: type helm.sh/release.v1, labelled by name, owner, status and version.
			rel := fmt.Sprintf("rel-%05d", i)
			_, err := e.c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1." + rel + ".v1",
					Labels: map[string]string{"name": rel, "owner": "helm", "status": "deployed", "version": "1"}},
				Type: "helm.sh/release.v1",
				Data: map[string][]byte{"release": []byte(release)},
			}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		fmt.Printf("  created in %s\n", time.Since(start).Round(time.Second))
		if err := measure(fmt.Sprintf("+ %d unlabelled ConfigMaps and %d Helm release Secrets", t.unlabelled, t.unlabelled)); err != nil {
			return err
		}
	}
	if t.annotated > 0 {
		if t.annotated > t.unlabelled {
			return fmt.Errorf("-annotated %d: at most -unlabelled (%d), each follows one unlabelled ConfigMap", t.annotated, t.unlabelled)
		}
		fmt.Printf("creating %d Deployments (0 replicas) carrying %s, each reading one unlabelled ConfigMap...\n", t.annotated, api.ReloaderAuto)
		start := time.Now()
		zero := int32(0)
		if err := parallel(t.annotated, 16, func(i int) error {
			name := fmt.Sprintf("reloaded-%05d", i)
			tmpl := framework.PodTemplate(name, []string{fmt.Sprintf("plain-%05d", i)}, nil)
			_, err := e.c.Kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{api.ReloaderAuto: "true"}},
				Spec:       appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
			}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		// The controller with the trigger writes a record per workload at its first look: wait for
		// them, so the row includes that look.
		if err := framework.Eventually(ctx, 10*time.Minute, "a record of every annotated Deployment", func(ctx context.Context) (bool, string, error) {
			l, err := e.meta.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns).List(ctx,
				metav1.ListOptions{LabelSelector: api.RecordLabel + "=" + api.RecordValue})
			if err != nil {
				return false, "", err
			}
			return len(l.Items) >= t.annotated, fmt.Sprintf("%d/%d records", len(l.Items), t.annotated), nil
		}); err != nil {
			return err
		}
		fmt.Printf("  created, and recorded by the controller with -pinning, in %s\n", time.Since(start).Round(time.Second))
		if err := measure(fmt.Sprintf("+ %d Deployments with %s", t.annotated, api.ReloaderAuto)); err != nil {
			return err
		}
	}
	return nil
}
