package trust

import (
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

func TestWalk(t *testing.T) {
	r1, r2, r3 := newKeys(t, 3), newKeys(t, 3), newKeys(t, 3)
	rel := newKeys(t, 3)
	attacker := newKeys(t, 2)

	v1 := roundTrip(t, newRoot(t, 1, r1, 2, rel[:1], r1[0], r1[1]))
	// v2 rotates every root key and the release key: old 2 of 3 and new 2 of 3 sign.
	v2 := roundTrip(t, newRoot(t, 2, r2, 2, rel[1:2], r1[0], r1[2], r2[0], r2[1]))
	v3 := roundTrip(t, newRoot(t, 3, r3, 2, rel[2:], r2[1], r2[2], r3[0], r3[2]))
	long := []*Root{}
	prev, prevKeys := v1, r1
	for v := uint64(2); v <= MaxChain+2; v++ {
		ks := newKeys(t, 1)
		r := newRoot(t, v, ks, 1, rel[:1], prevKeys[0], prevKeys[1%len(prevKeys)], ks[0])
		long = append(long, r)
		prev, prevKeys = r, ks
	}
	_ = prev

	cases := []struct {
		name    string
		trusted *Root
		chain   []*Root
		want    uint64
		code    ota.Code
		msg     string
	}{
		{"one step", v1, []*Root{v2}, 2, "", ""},
		{"two steps at once", v1, []*Root{v2, v3}, 3, "", ""},
		{"history passed over", v2, []*Root{v1, v2, v3}, 3, "", ""},
		{"lower version refused", v3, []*Root{v2}, 3, ota.CodeRootVersion, "not newer"},
		{"equal version refused", v2, []*Root{v2}, 2, ota.CodeRootVersion, "not newer"},
		{"a gap refused", v1, []*Root{v3}, 1, ota.CodeRootVersion, "want 2"},
		{"out of order refused", v1, []*Root{v3, v2}, 1, ota.CodeRootVersion, "want 2"},
		{"signed only by an attacker", v1, []*Root{roundTrip(t, newRoot(t, 2, attacker[:1], 1, attacker[1:], attacker[0]))}, 1, ota.CodeRootSignature, "root keys of version 1"},
		{"attacker's keys but signed by 1 of the old 2-of-3", v1, []*Root{newRoot(t, 2, attacker, 1, rel[:1], r1[0], attacker[0])}, 1, ota.CodeRootSignature, "1 of 2"},
		{"old threshold met, own not", v1, []*Root{newRoot(t, 2, r2, 2, rel[:1], r1[0], r1[1], r2[0])}, 1, ota.CodeRootSignature, "its own root keys"},
		{"2 of 3 old and 2 of 3 new", v1, []*Root{newRoot(t, 2, r2, 2, rel[:1], r1[1], r1[2], r2[1], r2[2])}, 2, "", ""},
		{"the bound walked", v1, long[:MaxChain], MaxChain + 1, "", ""},
		{"past the bound refused whole", v1, long, 1, ota.CodeRootChainLimit, "at most 32"},
		{"a bad step refuses the chain", v1, []*Root{v2, newRoot(t, 3, r3, 2, rel[:1], attacker[0], r3[0], r3[1])}, 1, ota.CodeRootSignature, "version 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Walk(c.trusted, c.chain)
			if got.Version != c.want {
				t.Errorf("walked to version %d, want %d", got.Version, c.want)
			}
			if c.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if ota.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want %s saying %q", err, c.code, c.msg)
			}
			if got != c.trusted {
				t.Error("a refused chain changed the trusted root")
			}
		})
	}
}

func TestAnchor(t *testing.T) {
	r, rel, other := newKeys(t, 3), newKeys(t, 1), newKeys(t, 1)
	for _, c := range []struct {
		name string
		root *Root
		ok   bool
	}{
		{"2 of 3 own keys", newRoot(t, 1, r, 2, rel, r[0], r[2]), true},
		{"1 of 3 own keys when 2 are needed", newRoot(t, 1, r, 2, rel, r[0]), false},
		{"the release key does not sign roots", newRoot(t, 1, r, 1, rel, rel[0]), false},
		{"unsigned", newRoot(t, 1, r, 1, rel), false},
		{"a stranger", newRoot(t, 1, r, 1, rel, other[0]), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Anchor(roundTrip(t, c.root))
			if (err == nil) != c.ok {
				t.Fatalf("Anchor = %v, want ok=%v", err, c.ok)
			}
			if err != nil && ota.CodeOf(err) != ota.CodeRootSignature {
				t.Fatalf("code %s, want root_signature", ota.CodeOf(err))
			}
		})
	}
}

func TestRevoked(t *testing.T) {
	r, rel := newKeys(t, 1), newKeys(t, 3)
	old := newRoot(t, 1, r, 1, rel[:2])
	next := newRoot(t, 2, r, 1, rel[1:])
	got := Revoked(old, next)
	if len(got) != 1 || got[0].ID != rel[0].pub.ID {
		t.Fatalf("Revoked = %v, want only %s", got, rel[0].pub.ID)
	}
}
