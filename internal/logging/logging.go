// Package logging builds the slog logger every command uses and carries it through contexts.
//
// JSON when the output is not a terminal (a pod's logs go to a collector), readable text on a terminal.
// The level comes from LOG_LEVEL with the original tool's names.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/term"
)

// Levels above error, so LOG_LEVEL=fatal or panic (accepted for compatibility with the original tool)
// silence everything but failures that end the program.
const (
	LevelFatal = slog.LevelError + 4
	LevelPanic = slog.LevelError + 8
)

// ParseLevel maps the original tool's LOG_LEVEL names; empty means info.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	case "fatal":
		return LevelFatal, nil
	case "panic":
		return LevelPanic, nil
	}
	return 0, fmt.Errorf("LOG_LEVEL %q is not one of debug, info, warn, error, fatal, panic", s)
}

// Format selects the handler.
type Format string

const (
	FormatAuto Format = ""
	FormatJSON Format = "json"
	FormatText Format = "text"
)

// ParseFormat reads LOG_FORMAT: json, text, or empty for FormatAuto.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case FormatAuto, FormatJSON, FormatText:
		return f, nil
	}
	return "", fmt.Errorf("LOG_FORMAT %q is not json or text (or empty: text on a terminal, json elsewhere)", s)
}

// New returns a logger writing to w. With FormatAuto it writes text to a terminal and JSON elsewhere.
func New(w io.Writer, level slog.Level, format Format) *slog.Logger {
	if format == FormatAuto {
		format = FormatJSON
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = FormatText
		}
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: levelNames}
	if format == FormatText {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func levelNames(_ []string, a slog.Attr) slog.Attr {
	if a.Key != slog.LevelKey {
		return a
	}
	switch lvl, _ := a.Value.Any().(slog.Level); {
	case lvl >= LevelPanic:
		a.Value = slog.StringValue("PANIC")
	case lvl >= LevelFatal:
		a.Value = slog.StringValue("FATAL")
	}
	return a
}

type ctxKey struct{}

// NewContext returns ctx carrying l.
func NewContext(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, ctxKey{}, l)
}

// FromContext returns the context's logger, or one that discards everything: library code never
// decides where logs go.
func FromContext(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(ctxKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
