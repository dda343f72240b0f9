package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// fakeTransfer is what the fake installers report in the end.
func fakeTransfer(t Target) ota.Transfer {
	return ota.Transfer{BytesFetched: t.Payload.Size / 10, BytesReused: t.Payload.Size - t.Payload.Size/10}
}

type eventRecorder struct {
	mu       sync.Mutex
	events   []ota.Event
	progress []ota.Progress
}

func (r *eventRecorder) Publish(_ ota.Status, ev ota.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *eventRecorder) Progress(p ota.Progress) {
	r.mu.Lock()
	r.progress = append(r.progress, p)
	r.mu.Unlock()
}

// TestTransferReported: what the writer says it fetched and reused reaches
// the progress reports, the event that ends the download, the status and
// the outcome; the writer is told what the booted slot holds.
func TestTransferReported(t *testing.T) {
	for _, code := range []ota.Code{"", ota.CodeChunkMismatch} {
		t.Run("code "+string(code), func(t *testing.T) {
			inst := &fakeInstaller{delay: time.Millisecond, code: code}
			rec := &eventRecorder{}
			store := &memStore{}
			a, err := New(Config{DeviceID: "dev-1", Policy: Policy{MaxRestarts: 2}, AgentVersion: "test", Logger: slog.New(slog.DiscardHandler)}, Deps{
				Store: store, Bootloader: &fakeBoot{}, Installer: inst, Checker: jsonChecker{}, Rebooter: &fakeReboot{}, Health: okHealth{},
				Publishers: []Publisher{rec},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx, "A", "boot-1") }()
			n := tgt("n", 1)
			if _, err := a.Install(ctx, offerJSON(n)); err != nil {
				t.Fatal(err)
			}
			cancel()
			<-done
			want := fakeTransfer(n)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if last := rec.progress[len(rec.progress)-1]; last.Transfer != want {
				t.Errorf("last progress %+v, want %+v", last, want)
			}
			var final *ota.Event
			for i := range rec.events {
				if e := &rec.events[i]; e.From == ota.Downloading || e.From == ota.Verifying {
					final = e
				}
			}
			if final == nil || final.Transfer != want {
				t.Fatalf("the event ending the download: %+v, want transfer %+v", final, want)
			}
			st := a.Status()
			if code == "" {
				if st.Target == nil || st.Target.Transfer != want {
					t.Errorf("status target %+v, want transfer %+v", st.Target, want)
				}
			} else if st.LastResult == nil || st.LastResult.Transfer != want {
				t.Errorf("status last_result %+v, want transfer %+v", st.LastResult, want)
			}
			if got := inst.booted(); got.Status != ota.SlotGood {
				t.Errorf("the writer was told the booted slot holds %+v", got)
			}
		})
	}
}
