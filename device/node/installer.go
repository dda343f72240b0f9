package node

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/backoff"
	"github.com/otad/otad/durable"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/verify"
)

type installer struct {
	slots      map[ota.Slot]slots.Target
	booted     ota.Slot
	stateDir   string // the chunked install's checkpoint and kept indexes
	stateFS    durable.FS
	checkpoint int64 // bytes between the chunked install's checkpoints; 0: the default
	readback   bool
	retry      backoff.Policy
	skew       time.Duration // trust.clock_skew: an offer is valid this long past its expires_at
	client     *http.Client
	schemes    []string
	sources    *Sources // payloads given by hand (otad install --payload)
	log        *slog.Logger
	// beforeWrite is Options.BeforeWrite.
	beforeWrite func()
	pipelined   func() (end func()) // Options.Pipelined
}

func (in *installer) Install(ctx context.Context, job agent.InstallJob, progress func(ota.Progress)) error {
	t := job.Target
	sj := slots.Job{
		Payload: t.Payload, Target: in.slots[t.Slot], Booted: in.slots[in.booted], Readback: in.readback, Retry: in.retry,
		HTTPClient: in.client, Schemes: in.schemes, Progress: progress, Pipelined: in.pipelined,
	}
	if !t.ExpiresAt.IsZero() {
		// A download that lost the network waits for it as long as the offer is valid.
		sj.Until = t.ExpiresAt.Add(in.skew)
	}
	src, given := in.sources.get(t.Key())
	if given {
		var err error
		if sj.Payload, sj.Schemes, err = src.apply(t.Payload, in.schemes); err != nil {
			return err
		}
		t.Payload = sj.Payload
	}
	if in.beforeWrite != nil {
		in.beforeWrite()
		ctx = afterFirstResponse(ctx, in.beforeWrite)
		sj.Progress = afterFirstBytes(progress, in.beforeWrite)
	}
	var err error
	if c := t.Payload.Chunks; c != nil {
		sj.URL = c.StoreURL
		err = slots.WriteChunked(ctx, slots.ChunkedJob{
			Job: sj, IndexURL: t.Payload.Chunks.IndexURL, Expect: verify.Expect(&t.Payload),
			Offer: t.Key(), StateDir: in.stateDir, StateFS: in.stateFS, CheckpointBytes: in.checkpoint, BootedImage: job.Booted.SHA256, Log: in.log,
		})
	} else {
		err = slots.Write(ctx, sj)
	}
	if err != nil && ota.CodeOf(err) == "" {
		err = ota.Wrap(ota.CodeWriteFailed, err)
	}
	if given {
		err = src.named(err)
	}
	return err
}

// afterFirstResponse calls drop once, when the first answer of the install's
// requests starts to arrive: by then the connection is up, and the pages its
// set-up touched (TLS's handshake: certificates parsed and checked, the key
// exchange) are done with. Dropped, they do not count in the
// install's peak RSS; what the download goes on using maps back at once
// (issue 30 item 4: an HTTPS install held them to its end, 17.7 MiB for a
// chunked one).
func afterFirstResponse(ctx context.Context, drop func()) context.Context {
	var once sync.Once
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotFirstResponseByte: func() { once.Do(drop) }})
}

// afterFirstBytes passes progress on, and calls drop once more at the first
// report of image bytes done: a chunked install's index and first requests
// (their parsing, the plan, the booted slot's list) are done with by then.
func afterFirstBytes(progress func(ota.Progress), drop func()) func(ota.Progress) {
	var once sync.Once
	return func(p ota.Progress) {
		if p.BytesDone > 0 {
			once.Do(drop)
		}
		if progress != nil {
			progress(p)
		}
	}
}
