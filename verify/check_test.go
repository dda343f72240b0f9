package verify

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

func TestCheck(t *testing.T) {
	signerA, keyA := newSigner(t, KeyECDSAP256)
	signerB, keyB := newSigner(t, KeyEd25519)
	untrusted, _ := newSigner(t, KeyECDSAP256)
	keys := NewKeyring(keyA, keyB)

	basePolicy := Policy{DeviceID: "gw-0001", Compatible: "acme,gw-v2", Threshold: 1, ClockSkew: 5 * time.Minute}
	baseFacts := Facts{
		Now:              testNow,
		SecurityFloor:    5,
		NewestIssuedAt:   testNow.Add(-2 * time.Hour),
		InactiveSlotSize: 512 << 20,
	}
	setExpires := func(d time.Duration) func(map[string]any) {
		return func(m map[string]any) { m["expires_at"] = testNow.Add(d).Format(time.RFC3339) }
	}
	both := func(fs ...func(map[string]any)) func(map[string]any) {
		return func(m map[string]any) {
			for _, f := range fs {
				f(m)
			}
		}
	}
	incompatible := func(m map[string]any) { m["compatible"] = []any{"acme,other"} }
	otherDevice := func(m map[string]any) { m["devices"] = []any{"gw-0099"} }
	lowSecurity := func(m map[string]any) { m["security_version"] = 4 }
	old := func(m map[string]any) { m["issued_at"] = testNow.Add(-2*time.Hour - time.Second).Format(time.RFC3339) }
	huge := func(m map[string]any) { payloadOf(m)["size"] = 1 << 30 }
	fromSize := func(n int64) func(map[string]any) { return func(m map[string]any) { deltaOf(m)["from_size"] = n } }
	plainHTTP := func(m map[string]any) { payloadOf(m)["url"] = "http://updates.example.com/x.img.zst" }

	tests := []struct {
		name    string
		edit    func(map[string]any)
		raw     func(manifest []byte) []byte // overrides the normal envelope
		signers []crypto.Signer              // default: signerA
		policy  func(*Policy)
		facts   func(*Facts)
		want    ota.Code
		field   string
	}{
		{name: "valid offer", want: ""},
		{name: "1 too large beats everything", raw: func([]byte) []byte { return bytes.Repeat([]byte("x"), ota.MaxEnvelopeSize+1) }, want: ota.CodeTooLarge},
		{name: "2 not JSON", raw: func([]byte) []byte { return []byte("{not json") }, want: ota.CodeBadEnvelope},
		{name: "2 no signatures", raw: func(m []byte) []byte {
			b, _ := MarshalEnvelope(m, Signature{Sig: []byte{1}})
			return bytes.Replace(b, []byte(`[{"sig":"AQ=="}]`), []byte(`[]`), 1)
		}, want: ota.CodeBadEnvelope, field: "signatures"},
		{name: "3 untrusted signer", signers: []crypto.Signer{untrusted}, want: ota.CodeBadSignature, field: "signatures"},
		{name: "3 tampered manifest", raw: func(m []byte) []byte {
			sig, err := SignManifest(m, signerA)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := MarshalEnvelope(bytes.Replace(m, []byte(`"4.2.0"`), []byte(`"4.2.1"`), 1), sig)
			return b
		}, want: ota.CodeBadSignature},
		{name: "3 bad signature beats bad manifest", raw: func([]byte) []byte { return envelopeFor(t, []byte("{not json"), untrusted) }, want: ota.CodeBadSignature},
		{name: "3 threshold 2 with one signature", policy: func(p *Policy) { p.Threshold = 2 }, want: ota.CodeBadSignature},
		{name: "3 threshold 2 met", signers: []crypto.Signer{signerA, signerB}, policy: func(p *Policy) { p.Threshold = 2 }, want: ""},
		{name: "4 signed garbage", raw: func([]byte) []byte { return envelopeFor(t, []byte("{not json"), signerA) }, want: ota.CodeBadManifest},
		{name: "4 chunked offer to an agent that does not install them", edit: chunked, want: ota.CodeBadManifest, field: "schema"},
		{name: "chunked offer", edit: chunked, policy: func(p *Policy) { p.Chunked = true }, want: ""},
		{name: "11 chunked index over http", edit: both(chunked, func(m map[string]any) { chunksOf(m)["index_url"] = "http://u.example.com/x.idx" }),
			policy: func(p *Policy) { p.Chunked = true }, want: ota.CodeURLNotAllowed, field: "payload.chunks.index_url"},
		{name: "11 chunked store over http", edit: both(chunked, func(m map[string]any) { chunksOf(m)["store_url"] = "http://u.example.com/x.store" }),
			policy: func(p *Policy) { p.Chunked = true }, want: ota.CodeURLNotAllowed, field: "payload.chunks.store_url"},
		{name: "11 chunked over http allowed", edit: both(chunked, func(m map[string]any) { chunksOf(m)["store_url"] = "http://u.example.com/x.store" }),
			policy: func(p *Policy) { p.Chunked, p.Schemes = true, []string{"https", "http"} }, want: ""},
		{name: "4 bad manifest beats incompatible", edit: both(incompatible, func(m map[string]any) { m["schema"] = 3 }), want: ota.CodeBadManifest, field: "schema"},
		{name: "5 incompatible", edit: incompatible, want: ota.CodeIncompatible, field: "compatible"},
		{name: "5 device without compatible string", policy: func(p *Policy) { p.Compatible = "" }, want: ota.CodeIncompatible},
		{name: "5 incompatible beats the rest", edit: both(incompatible, otherDevice, setExpires(-30*time.Minute), lowSecurity), want: ota.CodeIncompatible},
		{name: "6 not for this device", edit: otherDevice, want: ota.CodeNotForThisDevice, field: "devices"},
		{name: "6 no devices list targets all", edit: func(m map[string]any) { delete(m, "devices") }, want: ""},
		{name: "6 beats expired", edit: both(otherDevice, setExpires(-30*time.Minute)), want: ota.CodeNotForThisDevice},
		{name: "7 expired", edit: setExpires(-10 * time.Minute), want: ota.CodeExpired, field: "expires_at"},
		{name: "7 expiry plus skew equal to now", edit: setExpires(-5 * time.Minute), want: ota.CodeExpired},
		{name: "7 within skew", edit: setExpires(-4 * time.Minute), want: ""},
		{name: "7 no skew", edit: setExpires(-time.Second), policy: func(p *Policy) { p.ClockSkew = 0 }, want: ota.CodeExpired},
		{name: "7 expired beats downgrade", edit: both(setExpires(-30*time.Minute), lowSecurity), want: ota.CodeExpired},
		{name: "8 downgrade", edit: lowSecurity, want: ota.CodeDowngrade, field: "security_version"},
		{name: "8 equal to floor", edit: func(m map[string]any) { m["security_version"] = 5 }, want: ""},
		{name: "8 missing security_version is 0", edit: func(m map[string]any) { delete(m, "security_version") }, want: ota.CodeDowngrade},
		{name: "8 downgrade beats stale", edit: both(lowSecurity, old), want: ota.CodeDowngrade},
		{name: "9 stale", edit: old, want: ota.CodeStale, field: "issued_at"},
		{name: "9 same issued_at is not stale", edit: func(m map[string]any) { m["issued_at"] = testNow.Add(-2 * time.Hour).Format(time.RFC3339) }, want: ""},
		{name: "9 nothing accepted yet", edit: old, facts: func(f *Facts) { f.NewestIssuedAt = time.Time{} }, want: ""},
		{name: "9 stale beats too big", edit: both(old, huge), want: ota.CodeStale},
		{name: "10 too big for slot", edit: huge, want: ota.CodeTooBigForSlot, field: "payload.size"},
		{name: "10 exactly the slot size", edit: func(m map[string]any) { payloadOf(m)["size"] = 512 << 20 }, want: ""},
		{name: "10 unknown slot size", edit: huge, facts: func(f *Facts) { f.InactiveSlotSize = 0 }, want: ""},
		{name: "10 too big beats url", edit: both(huge, plainHTTP), want: ota.CodeTooBigForSlot},
		{name: "10 an older image larger than the slot", edit: both(cdcChunked, fromSize(512<<20+1)), policy: func(p *Policy) { p.Chunked = true },
			want: ota.CodeTooBigForSlot, field: "payload.chunks.deltas[0].from_size"},
		{name: "10 an older image of the slot's size", edit: both(cdcChunked, fromSize(512<<20)), policy: func(p *Policy) { p.Chunked = true }, want: ""},
		{name: "10 an older image and an unknown slot size", edit: both(cdcChunked, fromSize(1<<40)), policy: func(p *Policy) { p.Chunked = true },
			facts: func(f *Facts) { f.InactiveSlotSize = 0 }, want: ""},
		{name: "11 http not allowed by default", edit: plainHTTP, want: ota.CodeURLNotAllowed, field: "payload.url"},
		{name: "11 http allowed when configured", edit: plainHTTP, policy: func(p *Policy) { p.Schemes = []string{"https", "HTTP"} }, want: ""},
		{name: "11 file allowed when configured", edit: func(m map[string]any) { payloadOf(m)["url"] = "file:///srv/x.img" }, policy: func(p *Policy) { p.Schemes = []string{"file"} }, want: ""},
		{name: "11 https refused when only file configured", policy: func(p *Policy) { p.Schemes = []string{"file"} }, want: ota.CodeURLNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			manifest := manifestJSON(t, tt.edit)
			var raw []byte
			if tt.raw != nil {
				raw = tt.raw(manifest)
			} else {
				signers := tt.signers
				if signers == nil {
					signers = []crypto.Signer{signerA}
				}
				raw = envelopeFor(t, manifest, signers...)
			}
			p, f := basePolicy, baseFacts
			if tt.policy != nil {
				tt.policy(&p)
			}
			if tt.facts != nil {
				tt.facts(&f)
			}
			offer, err := Check(raw, keys, p, f)
			if got := ota.CodeOf(err); got != tt.want {
				t.Fatalf("Check: code %q, want %q (err: %v)", got, tt.want, err)
			}
			if tt.want != "" {
				var re *ota.Error
				if !errors.As(err, &re) {
					t.Fatalf("error %T is not a *ota.Error", err)
				}
				if tt.field != "" && re.Field != tt.field {
					t.Errorf("field %q, want %q (err: %v)", re.Field, tt.field, err)
				}
				// Past the signature and manifest checks the refusal names its offer.
				if named := offer != nil; named != tt.want.Authentic() {
					t.Errorf("refused with %s: offer returned = %v", tt.want, named)
				}
				if offer != nil && (offer.Manifest.ID == "" || offer.Digest() != sha256Hex(offer.ManifestBytes)) {
					t.Errorf("refused offer %+v: no id, or digest %s", offer.Manifest, offer.Digest())
				}
				return
			}
			if offer == nil {
				t.Fatal("accepted offer is nil")
			}
			if !bytes.Equal(offer.ManifestBytes, manifest) {
				t.Errorf("ManifestBytes differ from the signed bytes")
			}
			if !bytes.Equal(offer.Envelope, raw) {
				t.Errorf("Envelope differs from the input")
			}
			if offer.Manifest.ID != "rel-2026.11.29-1" || offer.Manifest.Payload.Compression != "zstd" && offer.Manifest.Payload.Chunks == nil {
				t.Errorf("Manifest not parsed: %+v", offer.Manifest)
			}
		})
	}
}

func TestCheckNilKeyring(t *testing.T) {
	signer, _ := newSigner(t, KeyECDSAP256)
	raw := envelopeFor(t, manifestJSON(t, nil), signer)
	_, err := Check(raw, nil, Policy{DeviceID: "gw-0001", Compatible: "acme,gw-v2"}, Facts{Now: testNow})
	if ota.CodeOf(err) != ota.CodeBadSignature {
		t.Fatalf("nil keyring: %v, want bad_signature", err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
