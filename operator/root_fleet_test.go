package operator

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/fleet"
)

// TestRootRotationAcrossASimulatedFleet: two groups of simulated devices
// ship root version 1; the chain 1→2 published retained for one group
// reaches its devices over MQTT and otactl status counts the fleet by trust
// version, the other group staying on 1. The rotated devices then take an
// offer signed by the release key that only version 2 trusts, and keep
// version 2 across the reboot into it.
func TestRootRotationAcrossASimulatedFleet(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	t.Chdir(t.TempDir())
	for _, k := range []string{"r1", "r2", "rel1", "rel2"} {
		mustRun(t, "keygen", "--type", "ed25519", k)
	}
	mustRun(t, "root", "init", "--root", "r1.pub,r2.pub", "--root-threshold", "2", "--release", "rel1.pub", "--release-threshold", "1", "--out", "1.json")
	mustRun(t, "root", "next", "--from", "1.json", "--release", "rel2.pub", "--out", "2.json")
	for _, f := range []string{"1.json", "2.json"} {
		mustRun(t, "root", "sign", "--key", "r1.key", f)
		mustRun(t, "root", "sign", "--key", "r2.key", f)
	}

	var north, south []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for _, g := range []struct {
		group, prefix string
		n             int
		ids           *[]string
	}{{"north", "n-", 6, &north}, {"south", "s-", 3, &south}} {
		f, err := fleet.New(fleet.Options{Broker: b.URL, Devices: g.n, Root: "1.json", Group: g.group, Prefix: g.prefix, Spread: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Devices {
			*g.ids = append(*g.ids, d.ID)
		}
		go func() { done <- f.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
	all := append(append([]string{}, north...), south...)
	fv := fleetStatuses(t, b.URL)
	onRoot := func(v uint64) func(ota.Status) bool {
		return func(st ota.Status) bool { return st.State == ota.Idle && st.TrustVersion == v }
	}
	waitFleet(t, fv, "every device on root 1", all, onRoot(1))
	summary := func() string {
		r := mustRun(t, "status", "--broker", b.URL, "--summary", "--window", "2s")
		_, line, _ := strings.Cut(r.stdout, "trust:")
		return strings.TrimSpace(line)
	}
	if got := summary(); got != "9 v1" {
		t.Fatalf("trust totals before the rotation %q, want 9 v1", got)
	}

	if r := mustRun(t, "root", "publish", "--broker", b.URL, "--group", "north", "1.json", "2.json"); !strings.Contains(r.stdout, "ota/groups/north/trust/root") {
		t.Fatalf("root publish: %s", r.stdout)
	}
	waitFleet(t, fv, "the north group on root 2", north, onRoot(2))
	if got := summary(); got != "6 v2, 3 v1" {
		t.Fatalf("trust totals after the rotation %q, want 6 v2, 3 v1", got)
	}
	for _, id := range south {
		if st, _ := fv.Status(id); st.TrustVersion != 1 {
			t.Errorf("%s (group south) on root %d, want 1", id, st.TrustVersion)
		}
	}

	// An offer signed by rel2, a key only root 2 lists: the north devices
	// install it; after their reboot they still hold root 2.
	img := bytes.Repeat([]byte("rotated "), 8192)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(img) }))
	t.Cleanup(srv.Close)
	if err := os.WriteFile("img", img, 0o644); err != nil {
		t.Fatal(err)
	}
	env := mustRun(t, "sign", "--key", "rel2.key", "--image", "img", "--version", "2.0", "--compatible", "otasim", "--url", srv.URL+"/img")
	if err := os.WriteFile("offer.json", []byte(env.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "publish", "--broker", b.URL, "--group", "north", "offer.json")
	waitFleet(t, fv, "the north group on 2.0 after a reboot, still on root 2", north, func(st ota.Status) bool {
		return onRoot(2)(st) && st.BootedSlot == ota.SlotB && st.Slots[ota.SlotB].Version == "2.0" && st.Slots[ota.SlotB].Status == ota.SlotGood
	})
}
