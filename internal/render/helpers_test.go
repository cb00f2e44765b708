package render

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
)

// renderString renders input with opts and returns the result and the warnings logged.
func renderString(t testing.TB, opts *Options, input string) (*result, string, error) {
	t.Helper()
	if opts == nil {
		opts = NewOptions()
	}
	var logs bytes.Buffer
	ctx := logging.NewContext(context.Background(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	docs, err := parseStream("stdin", strings.NewReader(input))
	if err != nil {
		return nil, logs.String(), err
	}
	res, err := render(ctx, opts, docs)
	return res, logs.String(), err
}

func mustRender(t testing.TB, opts *Options, input string) (*result, string) {
	t.Helper()
	res, logs, err := renderString(t, opts, input)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return res, logs
}

// configMap is a minimal opted-in ConfigMap document.
func configMap(name string, extra ...string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name +
		"\n  labels: {configmap-attacher.io/revisioned: \"true\"}\n" + strings.Join(extra, "\n") + "\ndata: {k: v}\n"
}

// deployment is a Deployment whose pod spec is the given YAML (indented by the caller as a block at
// column 0).
func deployment(name, podSpec string) string {
	var b strings.Builder
	b.WriteString("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: " + name + "\nspec:\n  template:\n    spec:\n")
	for _, l := range strings.Split(strings.TrimRight(podSpec, "\n"), "\n") {
		b.WriteString("      " + l + "\n")
	}
	return b.String()
}

func docs(parts ...string) string { return strings.Join(parts, "---\n") }

// secretOptedIn is a minimal opted-in Secret document.
func secretOptedIn(name string) string {
	return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: " + name +
		"\n  labels: {configmap-attacher.io/revisioned: \"true\"}\nstringData: {k: v}\n"
}
