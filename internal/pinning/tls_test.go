package pinning

import (
	"context"
	"testing"
	"time"

	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// The expiry gauge reads the certificate being served: a fresh one is good for a year.
func TestCertsReportTheServedCertificatesExpiry(t *testing.T) {
	c := &Certs{Kube: kubefake.NewClientset(), Namespace: "kube-system", Secret: "cma-webhook-tls", Hosts: []string{"127.0.0.1"}}
	if err := c.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	c.Report(m)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, f := range families {
		if f.GetName() == "configmap_attacher_webhook_certificate_expiry_timestamp_seconds" {
			got = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if want := float64(c.NotAfter().Unix()); got != want || c.NotAfter().IsZero() {
		t.Fatalf("expiry gauge = %v; want the served certificate's NotAfter %v", got, c.NotAfter())
	}
	if left := time.Until(c.NotAfter()); left < 360*24*time.Hour || left > 366*24*time.Hour {
		t.Fatalf("a fresh certificate expires in %s; want about a year", left)
	}
}
