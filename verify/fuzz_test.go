package verify

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/otad/otad/ota"
)

// seedFiles adds every file matching pattern under ../testdata as a fuzz seed.
func seedFiles(f *testing.F, pattern string) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "testdata", pattern))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseEnvelope(f *testing.F) {
	seedFiles(f, "manifests/*.envelope.json")
	m := base64.StdEncoding.EncodeToString([]byte(`{"schema":1}`))
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `{"manifest":"` + m + `","signatures":[{"sig":"AQID"}]}`,
		`{"manifest":"` + m + `","signatures":[{"keyid":"ab","sig":"AQ"}]}`,
		`{"manifest":1,"signatures":{}}`, `{"manifest":"` + m + `","signatures":[{"sig":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		env, err := ParseEnvelope(raw)
		sum := EnvelopeDigest(raw) // a refusal's name for the offer
		if err == nil && sum != digest(env.Manifest) {
			t.Fatalf("EnvelopeDigest %q, the parsed manifest's is %q", sum, digest(env.Manifest))
		}
		if err != nil {
			var re *ota.Error
			if !errors.As(err, &re) || (re.Code != ota.CodeTooLarge && re.Code != ota.CodeBadEnvelope) {
				t.Fatalf("error is not a too_large/bad_envelope refusal: %#v", err)
			}
			return
		}
		if len(raw) > ota.MaxEnvelopeSize || len(env.Manifest) == 0 || len(env.Signatures) == 0 || len(env.Signatures) > maxSignatures {
			t.Fatalf("accepted an envelope breaking the rules: %d bytes, %+v", len(raw), env)
		}
		// What parses re-marshals and parses to the same thing.
		again, err := MarshalEnvelope(env.Manifest, env.Signatures...)
		if err != nil {
			return // re-encoding can exceed the limit; that is MarshalEnvelope's refusal, not a bug
		}
		env2, err := ParseEnvelope(again)
		if err != nil || !bytes.Equal(env2.Manifest, env.Manifest) || len(env2.Signatures) != len(env.Signatures) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	seedFiles(f, "manifests/*.manifest.json")
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add(manifestJSON(f, nil))
	f.Add(manifestJSON(f, func(m map[string]any) { m["schema"] = 3 }))
	f.Add(manifestJSON(f, chunked))
	f.Add(manifestJSON(f, func(m map[string]any) { m["schema"] = 2 }))
	f.Add(manifestJSON(f, func(m map[string]any) {
		delete(m, "devices")
		payloadOf(m)["compression"] = "none"
		delete(payloadOf(m), "download_size")
	}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if ota.CodeOf(err) != ota.CodeBadManifest {
				t.Fatalf("error is not a bad_manifest refusal: %#v", err)
			}
			return
		}
		// Invariants every accepted manifest holds.
		if (m.Schema == 1) != (m.Payload.Chunks == nil) || (m.Schema == 1) == (m.Payload.URL == "") {
			t.Fatalf("schema %d with url %q and chunks %+v", m.Schema, m.Payload.URL, m.Payload.Chunks)
		}
		if m.Payload.Chunks != nil && Expect(&m.Payload).Validate() != nil {
			t.Fatalf("accepted chunks that do not agree: %v", Expect(&m.Payload).Validate())
		}
		if m.Schema < 1 || m.Schema > 2 || !idPattern.MatchString(m.ID) || m.Version == "" || len(m.Compatible) == 0 ||
			m.Payload.Size <= 0 || len(m.Payload.SHA256) != 64 || !m.ExpiresAt.After(m.IssuedAt) ||
			(m.Devices != nil && len(m.Devices) == 0) {
			t.Fatalf("accepted a manifest breaking the rules: %+v", m)
		}
		for _, c := range m.Payload.SHA256 {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				t.Fatalf("sha256 not normalised: %q", m.Payload.SHA256)
			}
		}
	})
}
