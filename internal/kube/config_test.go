package kube

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// apiStub answers a ConfigMap GET after `hang`, and a watch with a bookmark-free event stream that
// stays open for `hang`.
func apiStub(hang time.Duration) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for i := 0; ; i++ {
				fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"ns","resourceVersion":"%d"}}}`+"\n", i, i+1)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(hang / 10):
				}
			}
		}
		select {
		case <-r.Context().Done():
		case <-time.After(hang):
			fmt.Fprint(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns"}}`)
		}
	}))
}

func TestRequestsAreBoundedButWatchesAreNot(t *testing.T) {
	srv := apiStub(2 * time.Second)
	defer srv.Close()
	o := &ClientOptions{Kubeconfig: writeKubeconfig(t, srv.URL), RequestTimeout: 300 * time.Millisecond}
	cfg, err := o.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	start := time.Now()
	_, err = kc.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("GET of a hung server: err %v after %s; want a deadline error after ~300ms", err, time.Since(start))
	}

	w, err := kc.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deadline := time.After(time.Second) // past the request timeout
	events := 0
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %d events, before the request timeout had passed three times over", events)
			}
			events++
		case <-deadline:
			if events < 3 {
				t.Fatalf("only %d watch events in 1s", events)
			}
			return
		}
	}
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := t.TempDir() + "/kubeconfig"
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
