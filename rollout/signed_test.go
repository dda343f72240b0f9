package rollout

import (
	"errors"
	"strings"
	"testing"

	"github.com/otad/otad/verify"
)

// A message sealed for a topic opens on that topic under a trust in its
// key, whatever its payload holds; on another topic, under another key,
// unsigned or altered it is forged; unsigned it opens only when the
// control plane is unsigned.
func TestSealAndOpen(t *testing.T) {
	key, err := verify.GenerateKey(verify.KeyEd25519)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := verify.GenerateKey(verify.KeyECDSAP256)
	trust := Trust{Keys: verify.NewKeyring(verify.Key{Public: key.Public()})}
	const topic = "ota/rollouts/r1/control"
	payload := `{"id":"c1","op":"pause","reason":"<b>&` + "\u2028" + ` tickets</b>"}`
	sealed, err := Seal(key, topic, 7, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	if p, n, err := trust.Open("command", topic, sealed); err != nil || n != 7 || string(p) != payload {
		t.Fatalf("opened %q %d %v", p, n, err)
	}
	byOther, _ := Seal(other, topic, 7, []byte(payload))
	for _, tc := range []struct {
		name  string
		trust Trust
		topic string
		msg   []byte
		want  string
	}{
		{"another topic", trust, "ota/rollouts/r2/control", sealed, "signed for " + topic},
		{"another key", trust, topic, byOther, "forged command on " + topic + " ignored: not signed by a trusted operator key"},
		{"altered", trust, topic, []byte(strings.Replace(string(sealed), "pause", "abort", 1)), "not signed by a trusted operator key"},
		{"a higher counter", trust, topic, []byte(strings.Replace(string(sealed), `"counter":7`, `"counter":8`, 1)), "not signed by a trusted operator key"},
		{"unsigned", trust, topic, []byte(payload), "(an unsigned message)"},
		{"no key trusted", Trust{}, topic, sealed, "(no operator keys are trusted)"},
	} {
		if _, _, err := tc.trust.Open("command", tc.topic, tc.msg); !errors.Is(err, ErrForged) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if p, _, err := (Trust{Unsigned: true}).Open("command", topic, []byte(payload)); err != nil || string(p) != payload {
		t.Errorf("unsigned, --insecure-unsigned: %q %v", p, err)
	}
}
