package main

import (
	"net/http/httptest"
	"testing"
)

// The writes and reads the reloader scenario reports are counted by requestKind: kube-apiserver's
// verbs and resources, spelled as its apiserver_request_total spells them.
func TestRequestKind(t *testing.T) {
	for _, tc := range []struct {
		method, target, contentType string
		want                        string
	}{
		{"GET", "/api/v1/namespaces/ns/configmaps", "", "LIST configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=5", "", "WATCH configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps/cfg-1", "", "GET configmaps"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments", "", "LIST deployments"},
		{"PATCH", "/apis/apps/v1/namespaces/ns/deployments/app-0", "application/strategic-merge-patch+json", "PATCH deployments"},
		{"PATCH", "/apis/apps/v1/namespaces/ns/deployments/app-0?fieldManager=configmap-attacher", "application/apply-patch+yaml", "APPLY deployments"},
		{"PUT", "/apis/argoproj.io/v1alpha1/namespaces/ns/rollouts/app-1", "application/json", "PUT rollouts"},
		{"PUT", "/apis/apps/v1/namespaces/ns/deployments/app-0/status", "application/json", "PUT deployments/status"},
		{"POST", "/api/v1/namespaces/ns/events", "application/json", "POST events"},
		{"GET", "/api/v1/nodes", "", "LIST nodes"},
		{"GET", "/api/v1/namespaces", "", "LIST namespaces"},
		{"GET", "/api/v1/namespaces/ns", "", "GET namespaces"},
		{"POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", "application/json", "POST mutatingwebhookconfigurations"},
		{"GET", "/apis/argoproj.io/v1alpha1", "", "GET discovery"},
		{"GET", "/version", "", "GET discovery"},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if tc.contentType != "" {
			r.Header.Set("Content-Type", tc.contentType)
		}
		if got := requestKind(r); got != tc.want {
			t.Errorf("%s %s (%s): %q, want %q", tc.method, tc.target, tc.contentType, got, tc.want)
		}
	}
	if !isWrite("APPLY deployments") || !isWrite("POST events") || isWrite("LIST deployments") || isWrite("WATCH configmaps") {
		t.Error("isWrite: APPLY and POST are writes, LIST and WATCH are not")
	}
}
