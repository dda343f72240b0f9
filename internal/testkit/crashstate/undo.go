package crashstate

import (
	"context"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/ota"
)

// undo is the operator of the Cancel and MarkActive scenarios, looking at
// each status s: once per update (the journal's last result says whether
// it was done) they cancel the download, or drop the staged install, and
// install the same offer again (again wakes the rig's otad install).
// Under the manual policy an install staged after that waits for their
// reboot: undo says so, and the rig reboots the device.
func (r *Rig) undo(ctx context.Context, a *agent.Agent, s ota.Status, again chan<- struct{}) (reboot bool) {
	done := r.undone(s)
	var err error
	switch {
	case r.sc.End == Cancel && !done && s.State == ota.Downloading && s.Target != nil && s.Target.BytesDone > 0:
		err = a.Cancel(ctx)
	case r.sc.End == MarkActive && !done && s.State == ota.Staged:
		err = a.MarkActive(ctx, false)
	case r.sc.End == MarkActive && done && s.State == ota.Staged:
		return true
	default:
		return false
	}
	if err == nil {
		select {
		case again <- struct{}{}:
		default:
		}
	}
	return false
}

// undone says the operator's act is behind: the last result is the offer's
// cancelled ending.
func (r *Rig) undone(s ota.Status) bool {
	return s.LastResult != nil && s.LastResult.SHA256 == r.fx.NewSHA && s.LastResult.Code == ota.CodeCancelled
}

// stalled is the Cancel scenario's download: until the operator cancelled
// it once, it stalls after its first bytes, so the cancel always comes
// mid-download (a download of the fixture's image outruns the rig).
type stalled struct {
	agent.Installer
	done func() bool
}

func (s stalled) Install(ctx context.Context, job agent.InstallJob, progress func(ota.Progress)) error {
	if s.done() {
		return s.Installer.Install(ctx, job, progress)
	}
	return s.Installer.Install(ctx, job, func(p ota.Progress) {
		progress(p)
		if p.BytesDone > 0 {
			<-ctx.Done() // the operator's cancel
		}
	})
}
