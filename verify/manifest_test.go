package verify

import (
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

func TestParseManifest(t *testing.T) {
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	setP := func(k string, v any) func(map[string]any) { return func(m map[string]any) { payloadOf(m)[k] = v } }
	delP := func(k string) func(map[string]any) { return func(m map[string]any) { delete(payloadOf(m), k) } }

	tests := []struct {
		name  string
		edit  func(map[string]any)
		raw   string // used instead of edit when set
		field string // "" with ok
		ok    bool
	}{
		{name: "valid", ok: true},
		{name: "unknown fields ignored", edit: func(m map[string]any) { m["future"] = map[string]any{"x": 1}; payloadOf(m)["delta"] = true }, ok: true},
		{name: "no devices", edit: del("devices"), ok: true},
		{name: "no security_version", edit: del("security_version"), ok: true},
		{name: "no download_size", edit: delP("download_size"), ok: true},
		{name: "offset time", edit: set("issued_at", "2026-11-29T11:00:00+02:00"), ok: true},
		{name: "id of 128", edit: set("id", strings.Repeat("a", 128)), ok: true},
		{name: "not JSON", raw: "{", field: ""},
		{name: "array", raw: "[1,2]", field: ""},
		{name: "trailing garbage", raw: `{"schema":1} x`, field: ""},
		{name: "schema missing", edit: del("schema"), field: "schema"},
		{name: "schema 3", edit: set("schema", 3), field: "schema"},
		{name: "schema 0", edit: set("schema", 0), field: "schema"},
		{name: "schema string", edit: set("schema", "1"), field: "schema"},
		{name: "id missing", edit: del("id"), field: "id"},
		{name: "id empty", edit: set("id", ""), field: "id"},
		{name: "id too long", edit: set("id", strings.Repeat("a", 129)), field: "id"},
		{name: "id with slash", edit: set("id", "../etc/passwd"), field: "id"},
		{name: "id with space", edit: set("id", "rel 1"), field: "id"},
		{name: "version missing", edit: del("version"), field: "version"},
		{name: "version blank", edit: set("version", "  "), field: "version"},
		{name: "version with newline", edit: set("version", "1.0\nfake log line"), field: "version"},
		{name: "negative security_version", edit: set("security_version", -1), field: "security_version"},
		{name: "compatible missing", edit: del("compatible"), field: "compatible"},
		{name: "compatible empty", edit: set("compatible", []any{}), field: "compatible"},
		{name: "compatible empty entry", edit: set("compatible", []any{"a", ""}), field: "compatible[1]"},
		{name: "compatible not a list", edit: set("compatible", "acme,gw-v2"), field: "compatible"},
		{name: "devices empty", edit: set("devices", []any{}), field: "devices"},
		{name: "devices empty entry", edit: set("devices", []any{""}), field: "devices[0]"},
		{name: "issued_at missing", edit: del("issued_at"), field: "issued_at"},
		{name: "issued_at not RFC 3339", edit: set("issued_at", "29/11/2026"), field: "issued_at"},
		{name: "expires_at missing", edit: del("expires_at"), field: "expires_at"},
		{name: "expires before issued", edit: set("expires_at", testNow.Add(-2*time.Hour).Format(time.RFC3339)), field: "expires_at"},
		{name: "payload missing", edit: del("payload"), field: "payload"},
		{name: "url missing", edit: delP("url"), field: "payload.url"},
		{name: "url without scheme", edit: setP("url", "updates.example.com/x.img"), field: "payload.url"},
		{name: "url unparsable", edit: setP("url", "https://[::1"), field: "payload.url"},
		{name: "https without host", edit: setP("url", "https:///x.img"), field: "payload.url"},
		{name: "compression missing", edit: delP("compression"), field: "payload.compression"},
		{name: "compression unknown", edit: setP("compression", "bzip2"), field: "payload.compression"},
		{name: "size missing", edit: delP("size"), field: "payload.size"},
		{name: "size zero", edit: setP("size", 0), field: "payload.size"},
		{name: "size negative", edit: setP("size", -5), field: "payload.size"},
		{name: "size fractional", edit: setP("size", 1.5), field: "payload.size"},
		{name: "sha256 missing", edit: delP("sha256"), field: "payload.sha256"},
		{name: "sha256 short", edit: setP("sha256", "abcd"), field: "payload.sha256"},
		{name: "sha256 not hex", edit: setP("sha256", strings.Repeat("g", 64)), field: "payload.sha256"},
		{name: "download_size zero", edit: setP("download_size", 0), field: "payload.download_size"},
		{name: "download_size differs uncompressed", edit: func(m map[string]any) { payloadOf(m)["compression"] = "none" }, field: "payload.download_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.raw)
			if tt.raw == "" {
				b = manifestJSON(t, tt.edit)
			}
			m, err := ParseManifest(b)
			if tt.ok {
				if err != nil {
					t.Fatalf("ParseManifest: %v", err)
				}
				return
			}
			if ota.CodeOf(err) != ota.CodeBadManifest {
				t.Fatalf("ParseManifest: %v, want bad_manifest", err)
			}
			if m != nil {
				t.Errorf("refused manifest returned non-nil")
			}
			if got := err.(*ota.Error).Field; got != tt.field {
				t.Errorf("field %q, want %q (err: %v)", got, tt.field, err)
			}
		})
	}
}

func TestParseManifestValues(t *testing.T) {
	upper := strings.ToUpper("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
	b := manifestJSON(t, func(m map[string]any) {
		payloadOf(m)["sha256"] = upper
		m["issued_at"] = "2026-11-29T11:00:00.5+02:00"
	})
	m, err := ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{
		Schema: 1, ID: "rel-2026.11.29-1", Version: "4.2.0", SecurityVersion: 7,
		Compatible: []string{"acme,gw-v2"}, Devices: []string{"gw-0001", "gw-0002"},
		IssuedAt:  time.Date(2026, 11, 29, 9, 0, 0, 5e8, time.UTC),
		ExpiresAt: testNow.Add(30 * 24 * time.Hour),
		Payload: Payload{
			URL: "https://updates.example.com/rootfs-4.2.0.img.zst", Compression: "zstd", Size: 268435456,
			SHA256: strings.ToLower(upper), DownloadSize: 91234567,
		},
	}
	if m.Schema != want.Schema || m.ID != want.ID || m.Version != want.Version || m.SecurityVersion != want.SecurityVersion ||
		strings.Join(m.Compatible, "|") != strings.Join(want.Compatible, "|") || strings.Join(m.Devices, "|") != strings.Join(want.Devices, "|") ||
		m.Payload != want.Payload {
		t.Errorf("got %+v\nwant %+v", m, want)
	}
	if !m.IssuedAt.Equal(want.IssuedAt) || m.IssuedAt.Location() != time.UTC {
		t.Errorf("IssuedAt %v, want %v in UTC", m.IssuedAt, want.IssuedAt)
	}
	if !m.ExpiresAt.Equal(want.ExpiresAt) {
		t.Errorf("ExpiresAt %v, want %v", m.ExpiresAt, want.ExpiresAt)
	}
}
