package operator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/device"
)

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Issue 27: an expired offer published to devices went without a word —
// publish exited 0 silent, the devices logged the refusal, the fleet table
// showed nothing. Now publish warns for the devices that would refuse it
// (expired: all; not in its devices list) and for those that refused it
// already (incompatible), and `otactl status` counts refusals by code.
// Real agents on a real Mosquitto.
func TestPublishWarnsOfRefusalsAndStatusCountsThem(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	s, _ := signer.Trusted(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	ids := []string{"gw-01", "gw-02"}
	for i, id := range ids {
		d, err := device.New(device.Spec{
			ID: id, Dir: filepath.Join(dir, id), Compatible: []string{"board-1", "board-2"}[i], SlotSize: 1 << 20, TrustedKey: s.PublicKeyPEM,
			Broker: b.URL, Groups: []string{"fleet"}, Download: config.Download{Schemes: []string{"file"}},
		}, "test")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { d.Run(ctx) })
	}
	fv := fleetStatuses(t, b.URL)
	waitFleet(t, fv, "every device up and idle", ids, func(s ota.Status) bool { return s.State == ota.Idle })
	offer := func(name string, o signer.Offer) string {
		o.Version, o.URL, o.Size, o.SHA256 = "2.0", "file:///nonexistent", 4096, strings.Repeat("a", 64)
		env, err := s.Sign(o)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, env, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	refusedBoth := func(code ota.Code) func(ota.Status) bool {
		return func(s ota.Status) bool { return s.LastRefusal != nil && s.LastRefusal.Code == code }
	}

	expired := offer("expired.json", signer.Offer{ID: "rel-old", Compatible: "board-1", Issued: time.Now().Add(-48 * time.Hour), Expires: time.Hour})
	r := mustRun(t, "publish", "--broker", b.URL, "--group", "fleet", "--window", "1s", expired)
	if !strings.Contains(r.stderr, "warning: offer rel-old expired at") || !strings.Contains(r.stderr, "every device refuses it (expired)") ||
		!strings.Contains(r.stderr, "warning: 1 of the 2 target devices heard of have a compatible string it does not list (board-1) and refuse it (incompatible): gw-02") {
		t.Errorf("publish of an expired offer: %s", r.stderr)
	}
	// The compatible string is checked before the expiry.
	waitFleet(t, fv, "gw-01 refuses it as expired", ids[:1], refusedBoth(ota.CodeExpired))
	waitFleet(t, fv, "gw-02 as not for its board", ids[1:], refusedBoth(ota.CodeIncompatible))
	st := mustRun(t, "status", "--broker", b.URL, "--summary", "--window", "1s")
	if !strings.Contains(st.stdout, "refused:  1 expired, 1 incompatible\n") {
		t.Errorf("status --summary:\n%s", st.stdout)
	}

	// For board-2 and gw-01 only: gw-02 is not listed, gw-01 is a board-1.
	one := offer("one.json", signer.Offer{ID: "rel-one", Compatible: "board-2", Devices: []string{"gw-01"}})
	r = mustRun(t, "publish", "--broker", b.URL, "--group", "fleet", "--window", "1s", one)
	if !strings.Contains(r.stderr, "warning: 1 of the 2 target devices heard of are not in its devices list and refuse it (not_for_this_device): gw-02") ||
		!strings.Contains(r.stderr, "warning: 1 of the 2 target devices heard of have a compatible string it does not list (board-2) and refuse it (incompatible): gw-01") {
		t.Errorf("publish for gw-01 only:\n%s", r.stderr)
	}
	waitFleet(t, fv, "gw-01 refuses it (board-2 only)", ids[:1], refusedBoth(ota.CodeIncompatible))
	// Refused already, for a reason no status shows in advance.
	if w := wouldRefuse(mustRead(t, one), map[string]ota.Status{"gw-01": {LastRefusal: &ota.Refusal{ManifestSHA256: verifyDigest(t, string(mustRead(t, one))), Code: ota.CodeTooBigForSlot}}},
		time.Now()); len(w) != 1 || w[0] != "warning: 1 of the 1 target devices heard of refused it already (too_big_for_slot): gw-01" {
		t.Errorf("warnings %q", w)
	}
	st = mustRun(t, "status", "--broker", b.URL, "--window", "1s", "--refused", "incompatible")
	if rows, footer := tableRows(t, st.stdout); len(rows) != 1 || rows["gw-01"] == nil || !strings.Contains(footer, "refused:  1 incompatible\n") {
		t.Errorf("status --refused incompatible:\n%s", st.stdout)
	}
}
