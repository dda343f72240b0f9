package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestFailingHealthCheckWarns: each failed health check is a warning with its
// exit status and the start of its output, one per check interval (never more),
// while the window runs; a check that passes says nothing.
func TestFailingHealthCheckWarns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		warned bool
	}{
		{"fails", "echo disk /data is full; echo more; exit 3", true},
		{"passes", "echo fine", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := health{argv: []string{"/bin/sh", "-c", tc.script}, log: slog.New(slog.NewTextHandler(&logs, nil)), every: 100 * time.Millisecond}
			ctx, cancel := context.WithTimeout(t.Context(), 550*time.Millisecond)
			defer cancel()
			err := h.Check(ctx)
			n := strings.Count(logs.String(), "level=WARN msg=\"health check failed")
			if !tc.warned {
				if err != nil || n != 0 {
					t.Fatalf("err %v, %d warnings:\n%s", err, n, logs.String())
				}
				return
			}
			if err == nil || n < 2 || n > 6 || !strings.Contains(logs.String(), `exit="exit status 3"`) ||
				!strings.Contains(logs.String(), "disk /data is full") {
				t.Fatalf("err %v, %d warnings in 550ms of 100ms intervals:\n%s", err, n, logs.String())
			}
		})
	}
}
