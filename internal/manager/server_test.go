package manager

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

func TestMetricsHandlerServesProfilesOnlyWithProfiling(t *testing.T) {
	tests := []struct {
		name      string
		profiling bool
		path      string
		want      int
	}{
		{"metrics without profiling", false, "/metrics", http.StatusOK},
		{"no profiles without profiling", false, "/debug/pprof/heap", http.StatusNotFound},
		{"no profile index without profiling", false, "/debug/pprof/", http.StatusNotFound},
		{"heap profile with profiling", true, "/debug/pprof/heap", http.StatusOK},
		{"metrics with profiling", true, "/metrics", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			metricsHandler(metrics.New(), tt.profiling).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.want {
				t.Errorf("GET %s: %d, want %d", tt.path, rec.Code, tt.want)
			}
		})
	}
}
