package node

import (
	"context"
	"net/http"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

type installer struct {
	devices  map[ota.Slot]string
	booted   string
	readback bool
	retry    slots.Retry
	client   *http.Client
	schemes  []string
}

func (in *installer) Install(ctx context.Context, t agent.Target, progress func(bool, int64, int64)) error {
	err := slots.Write(ctx, slots.Job{
		URL: t.Payload.URL, Compression: t.Payload.Compression, Size: t.Payload.Size,
		SHA256: t.Payload.SHA256, DownloadSize: t.Payload.DownloadSize,
		Target: in.devices[t.Slot], Booted: in.booted, Readback: in.readback, Retry: in.retry,
		HTTPClient: in.client, Schemes: in.schemes,
		Progress: func(p slots.Progress) { progress(p.Phase == "verifying", p.BytesDone, p.BytesTotal) },
	})
	if err != nil && ota.CodeOf(err) == "" {
		return ota.Wrap(ota.CodeWriteFailed, err)
	}
	return err
}
