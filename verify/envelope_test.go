package verify

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

func TestParseEnvelope(t *testing.T) {
	m := base64.StdEncoding.EncodeToString([]byte(`{"schema":1}`))
	tests := []struct {
		name  string
		raw   string
		want  ota.Code
		field string
	}{
		{name: "valid", raw: `{"manifest":"` + m + `","signatures":[{"keyid":"ABCDEF","sig":"AQID"}]}`},
		{name: "unpadded base64", raw: `{"manifest":"` + strings.TrimRight(m, "=") + `","signatures":[{"sig":"AQI"}]}`},
		{name: "unknown fields ignored", raw: `{"manifest":"` + m + `","signatures":[{"sig":"AQID","x":1}],"threshold":1}`},
		{name: "empty", raw: ``, want: ota.CodeBadEnvelope},
		{name: "null", raw: `null`, want: ota.CodeBadEnvelope, field: "manifest"},
		{name: "array", raw: `[]`, want: ota.CodeBadEnvelope},
		{name: "truncated", raw: `{"manifest":"` + m, want: ota.CodeBadEnvelope},
		{name: "trailing data", raw: `{"manifest":"` + m + `","signatures":[{"sig":"AQID"}]} {}`, want: ota.CodeBadEnvelope},
		{name: "manifest missing", raw: `{"signatures":[{"sig":"AQID"}]}`, want: ota.CodeBadEnvelope, field: "manifest"},
		{name: "manifest empty", raw: `{"manifest":"","signatures":[{"sig":"AQID"}]}`, want: ota.CodeBadEnvelope, field: "manifest"},
		{name: "manifest not base64", raw: `{"manifest":"!!!","signatures":[{"sig":"AQID"}]}`, want: ota.CodeBadEnvelope, field: "manifest"},
		{name: "manifest wrong type", raw: `{"manifest":{"schema":1},"signatures":[{"sig":"AQID"}]}`, want: ota.CodeBadEnvelope, field: "manifest"},
		{name: "signatures missing", raw: `{"manifest":"` + m + `"}`, want: ota.CodeBadEnvelope, field: "signatures"},
		{name: "signatures empty", raw: `{"manifest":"` + m + `","signatures":[]}`, want: ota.CodeBadEnvelope, field: "signatures"},
		{name: "signature empty", raw: `{"manifest":"` + m + `","signatures":[{"sig":"AQID"},{"keyid":"ab"}]}`, want: ota.CodeBadEnvelope, field: "signatures[1].sig"},
		{name: "signature not base64", raw: `{"manifest":"` + m + `","signatures":[{"sig":"@@@"}]}`, want: ota.CodeBadEnvelope, field: "signatures[0].sig"},
		{name: "too many signatures", raw: `{"manifest":"` + m + `","signatures":[` + strings.Repeat(`{"sig":"AQID"},`, maxSignatures) + `{"sig":"AQID"}]}`, want: ota.CodeBadEnvelope, field: "signatures"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := ParseEnvelope([]byte(tt.raw))
			if got := ota.CodeOf(err); got != tt.want {
				t.Fatalf("code %q, want %q (err: %v)", got, tt.want, err)
			}
			if tt.want != "" {
				if f := err.(*ota.Error).Field; f != tt.field {
					t.Errorf("field %q, want %q (err: %v)", f, tt.field, err)
				}
				return
			}
			if string(env.Manifest) != `{"schema":1}` {
				t.Errorf("manifest %q", env.Manifest)
			}
			if len(env.Signatures) == 0 || len(env.Signatures[0].Sig) == 0 {
				t.Errorf("signatures %+v", env.Signatures)
			}
		})
	}
}

func TestParseEnvelopeKeyIDLowercased(t *testing.T) {
	m := base64.StdEncoding.EncodeToString([]byte(`{}`))
	env, err := ParseEnvelope([]byte(`{"manifest":"` + m + `","signatures":[{"keyid":"ABCDEF","sig":"AQID"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if env.Signatures[0].KeyID != "abcdef" || !bytes.Equal(env.Signatures[0].Sig, []byte{1, 2, 3}) {
		t.Errorf("signature %+v", env.Signatures[0])
	}
}

// The size limit is applied before any parsing: a huge well-formed envelope and huge
// garbage are refused alike, while garbage at the limit reaches the JSON check.
func TestParseEnvelopeSizeLimit(t *testing.T) {
	signer, _ := newSigner(t, KeyECDSAP256)
	sig, err := SignManifest([]byte("x"), signer)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("a", ota.MaxEnvelopeSize)
	wellFormed := []byte(`{"manifest":"eA==","signatures":[{"sig":"` + base64.StdEncoding.EncodeToString(sig.Sig) + `"}],"pad":"` + pad + `"}`)
	tests := []struct {
		name string
		raw  []byte
		want ota.Code
	}{
		{"well formed over limit", wellFormed, ota.CodeTooLarge},
		{"garbage over limit", bytes.Repeat([]byte{0xff}, ota.MaxEnvelopeSize+1), ota.CodeTooLarge},
		{"garbage at limit", bytes.Repeat([]byte{0xff}, ota.MaxEnvelopeSize), ota.CodeBadEnvelope},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseEnvelope(tt.raw); ota.CodeOf(err) != tt.want {
				t.Fatalf("ParseEnvelope(%d bytes): %v, want %s", len(tt.raw), err, tt.want)
			}
		})
	}
}

func TestMarshalEnvelopeRoundTrip(t *testing.T) {
	signer, key := newSigner(t, KeyEd25519)
	manifest := manifestJSON(t, nil)
	raw := envelopeFor(t, manifest, signer)
	env, err := ParseEnvelope(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(env.Manifest, manifest) || len(env.Signatures) != 1 || env.Signatures[0].KeyID != key.ID {
		t.Fatalf("round trip lost data: %+v", env)
	}
	if _, err := MarshalEnvelope(nil, env.Signatures...); err == nil {
		t.Error("MarshalEnvelope accepted an empty manifest")
	}
	if _, err := MarshalEnvelope(manifest); err == nil {
		t.Error("MarshalEnvelope accepted no signatures")
	}
	if _, err := MarshalEnvelope(make([]byte, ota.MaxEnvelopeSize), env.Signatures...); err == nil {
		t.Error("MarshalEnvelope made an envelope devices would refuse")
	}
}
