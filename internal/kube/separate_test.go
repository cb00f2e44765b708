package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The pinning webhook's calls must not wait behind the controllers': with the controllers' client
// saturated (its one token spent, the next in 1000 s), a call through Separate's clients is made at once.
func TestSeparateClientsAreNotDelayedByASaturatedClient(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"app"}}`))
	}))
	defer api.Close()
	controllers, err := NewClients(&rest.Config{Host: api.URL, QPS: 0.001, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	podPath, err := controllers.Separate()
	if err != nil {
		t.Fatal(err)
	}
	get := func(c *Clients) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.Kube.CoreV1().Namespaces().Get(ctx, "app", metav1.GetOptions{})
		return err
	}
	if err := get(controllers); err != nil {
		t.Fatalf("the controllers' first call: %v", err)
	}
	if err := get(controllers); err == nil {
		t.Fatal("the controllers' client is not saturated: the test proves nothing")
	}
	if err := get(podPath); err != nil {
		t.Fatalf("the pod path's call waited behind the controllers' rate limiter: %v", err)
	}
}
