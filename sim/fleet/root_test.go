package fleet_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/sim/fleet"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// --root takes what otad's [trust] root takes: a root signed by its own
// root keys; each device then holds a root of its own, from that one.
func TestFleetRoot(t *testing.T) {
	rk, err := verify.GenerateKey(verify.KeyEd25519)
	if err != nil {
		t.Fatal(err)
	}
	rel, keys := signer.Trusted(t)
	id := func(p any) verify.Key {
		kid, err := verify.KeyID(p)
		if err != nil {
			t.Fatal(err)
		}
		return verify.Key{ID: kid, Public: p}
	}
	r := &trust.Root{Version: 4, Root: trust.Role{Threshold: 1, Keys: []verify.Key{id(rk.Public())}}, Release: trust.Role{Threshold: 1, Keys: []verify.Key{id(rel.Key.Public())}}}
	write := func(name string) string {
		b, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unsigned := write("unsigned.json")
	if _, err := r.Sign(rk); err != nil {
		t.Fatal(err)
	}
	signed := write("root.json")
	for _, c := range []struct {
		o    fleet.Options
		want string
	}{
		{fleet.Options{Root: unsigned}, "root_signature"},
		{fleet.Options{Root: filepath.Join(t.TempDir(), "none.json")}, "no such file"},
		{fleet.Options{Root: signed, KeysDir: keys}, "do not go together"},
	} {
		c.o.Broker, c.o.Devices = "mqtt://127.0.0.1:1", 2
		if _, err := fleet.New(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	f, err := fleet.New(fleet.Options{Broker: "mqtt://127.0.0.1:1", Devices: 2, Root: signed})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Devices {
		if v := d.TrustVersion(); v != 4 {
			t.Errorf("%s holds root %d, want 4", d.ID, v)
		}
	}
}
