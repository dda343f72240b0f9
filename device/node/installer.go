package node

import (
	"context"
	"net/http"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/backoff"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/verify"
)

type installer struct {
	devices  map[ota.Slot]string
	mem      map[ota.Slot]*slots.MemSlot // a simulated device's slots, instead of devices
	booted   string
	stateDir string // the chunked install's checkpoint and kept indexes
	readback bool
	retry    backoff.Policy
	client   *http.Client
	schemes  []string
}

func (in *installer) Install(ctx context.Context, job agent.InstallJob, progress func(agent.InstallProgress)) error {
	t, p := job.Target, job.Target.Payload
	sj := slots.Job{
		URL: p.URL, Compression: p.Compression, Size: p.Size, SHA256: p.SHA256, DownloadSize: p.DownloadSize,
		Target: in.devices[t.Slot], Slot: in.mem[t.Slot], Booted: in.booted, Readback: in.readback, Retry: in.retry,
		HTTPClient: in.client, Schemes: in.schemes,
		Progress: func(sp slots.Progress) {
			progress(agent.InstallProgress{Verifying: sp.Phase == slots.PhaseVerifying, Done: sp.BytesDone, Total: sp.BytesTotal,
				Transfer: ota.Transfer{BytesFetched: sp.Downloaded, BytesReused: sp.Reused}})
		},
	}
	var err error
	if c := p.Chunks; c != nil {
		sj.URL = c.StoreURL
		err = slots.WriteChunked(ctx, slots.ChunkedJob{
			Job: sj, IndexURL: c.IndexURL, Expect: (&verify.Payload{Size: p.Size, Chunks: c}).Expect(),
			Offer: t.Key(), StateDir: in.stateDir, BootedImage: job.Booted.SHA256,
		})
	} else {
		err = slots.Write(ctx, sj)
	}
	if err != nil && ota.CodeOf(err) == "" {
		return ota.Wrap(ota.CodeWriteFailed, err)
	}
	return err
}
