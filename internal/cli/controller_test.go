package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestStoppedIsClean(t *testing.T) {
	stopped, stop := context.WithCancel(context.Background())
	stop()
	running := context.Background()
	registration := fmt.Errorf("registering the webhook (MutatingWebhookConfiguration x): %w", context.Canceled)
	refused := errors.New("registering the webhook (MutatingWebhookConfiguration x): forbidden")

	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		wantErr error
	}{
		{"stopped by the signal mid-registration", stopped, registration, nil},
		{"stopped by the signal after a clean run", stopped, nil, nil},
		{"a real error while stopping is still an error", stopped, refused, refused},
		{"canceled from elsewhere while running is an error", running, registration, registration},
		{"a real error while running", running, refused, refused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stoppedIsClean(tt.ctx, tt.err); got != tt.wantErr {
				t.Errorf("stoppedIsClean(%v) = %v, want %v", tt.err, got, tt.wantErr)
			}
		})
	}
}
