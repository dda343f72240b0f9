package mqtt

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A report request asks devices to publish their status again
// (docs/contract/mqtt.md, "Report requests"): a fleet view cannot rely on a
// broker delivering thousands of retained statuses to one wildcard
// subscription (RabbitMQ delivers none, Mosquitto queues at most ~1,000 for
// QoS 1), so it asks, and every device answers at a random time within the
// window the request names, so 10,000 answers do not arrive at once.
type ReportRequest struct {
	ID       string `json:"id"`        // the asker's name for it, for logs: a name (CheckName)
	WindowMS int64  `json:"window_ms"` // answer within this many milliseconds
}

const (
	// MaxReportRequest bounds a request's size; a larger one is ignored.
	MaxReportRequest = 1024
	// MinReportWindow and MaxReportWindow bound the window a device
	// answers within, whatever a request asks: no burst from a zero
	// window, no answer held for hours.
	MinReportWindow = time.Second
	MaxReportWindow = 5 * time.Minute
)

// ErrReportRequest marks a report request a device ignores.
var ErrReportRequest = errors.New("report request")

// NewReportRequest asks for answers within window, under a random ID.
func NewReportRequest(window time.Duration) ReportRequest {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return ReportRequest{ID: "r-" + hex.EncodeToString(b[:]), WindowMS: window.Milliseconds()}
}

// Encode is the request's payload.
func (r ReportRequest) Encode() []byte {
	b, _ := json.Marshal(r) // two plain fields: never fails
	return b
}

// Window is the window a device answers within: the request's, bounded to
// [MinReportWindow, MaxReportWindow].
func (r ReportRequest) Window() time.Duration {
	if r.WindowMS > MaxReportWindow.Milliseconds() {
		return MaxReportWindow
	}
	return max(MinReportWindow, time.Duration(r.WindowMS)*time.Millisecond)
}

// ParseReportRequest reads a request from the broker (outside input):
// a JSON object of at most MaxReportRequest bytes with a valid id and a
// window_ms that is not negative; unknown fields are ignored.
func ParseReportRequest(b []byte) (ReportRequest, error) {
	var r ReportRequest
	if len(b) > MaxReportRequest {
		return r, fmt.Errorf("%w: %d bytes, at most %d", ErrReportRequest, len(b), MaxReportRequest)
	}
	if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		return r, fmt.Errorf("%w: not a JSON object", ErrReportRequest)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: %w", ErrReportRequest, err)
	}
	if err := CheckName(r.ID); err != nil {
		return r, fmt.Errorf("%w: id: %w", ErrReportRequest, err)
	}
	if r.WindowMS < 0 {
		return r, fmt.Errorf("%w: window_ms %d is negative", ErrReportRequest, r.WindowMS)
	}
	return r, nil
}
