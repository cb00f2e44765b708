package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
)

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"", slog.LevelInfo, false},
		{"debug", slog.LevelDebug, false},
		{"INFO", slog.LevelInfo, false},
		{"warn", slog.LevelWarn, false},
		{"error", slog.LevelError, false},
		{"fatal", LevelFatal, false},
		{"panic", LevelPanic, false},
		{"verbose", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseLevel(tt.in)
		if (err != nil) != tt.wantErr || (err == nil && got != tt.want) {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestJSONOutputAndContext(t *testing.T) {
	var buf bytes.Buffer
	ctx := NewContext(context.Background(), New(&buf, slog.LevelInfo, FormatAuto))
	FromContext(ctx).Debug("hidden")
	FromContext(ctx).Info("attached", "object", "ConfigMap ns/a")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "attached" || rec["object"] != "ConfigMap ns/a" {
		t.Errorf("unexpected record %v", rec)
	}
	FromContext(context.Background()).Info("discarded without panicking")
}
