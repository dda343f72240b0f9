package verify

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/otad/otad/ota"
)

// Payload describes the image; the type is the vocabulary's, so the
// agent's journal and the slot writer take it as the manifest says it.
type Payload = ota.Payload

// Manifest is the signed description of one image (docs/contract/formats.md).
type Manifest struct {
	Schema          int       `json:"schema"`
	ID              string    `json:"id"`
	Version         string    `json:"version"`
	SecurityVersion uint64    `json:"security_version"`
	Compatible      []string  `json:"compatible"`
	Devices         []string  `json:"devices,omitempty"`
	IssuedAt        time.Time `json:"issued_at"`
	ExpiresAt       time.Time `json:"expires_at"`
	Payload         Payload   `json:"payload"`
}

const (
	schemaStream  = 1 // one stream (docs/contract/formats.md)
	schemaChunked = 2 // chunked (docs/contract/chunked.md)
	maxVersionLen = 256
	maxListLen    = 1024
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// rawManifest uses pointers so a missing field can be told from a zero one.
type rawManifest struct {
	Schema          *int64      `json:"schema"`
	ID              *string     `json:"id"`
	Version         *string     `json:"version"`
	SecurityVersion *uint64     `json:"security_version"`
	Compatible      *[]string   `json:"compatible"`
	Devices         *[]string   `json:"devices"`
	IssuedAt        *string     `json:"issued_at"`
	ExpiresAt       *string     `json:"expires_at"`
	Payload         *rawPayload `json:"payload"`
}

type rawPayload struct {
	URL          *string    `json:"url"`
	Compression  *string    `json:"compression"`
	Size         *int64     `json:"size"`
	SHA256       *string    `json:"sha256"`
	DownloadSize *int64     `json:"download_size"`
	Chunks       *rawChunks `json:"chunks"`
}

// ParseManifest runs check 4 of docs/contract/checks.md on manifest bytes whose signatures have
// already verified: JSON, schema, required fields and sane values. Unknown fields are
// ignored. Every refusal is a *ota.Error with code bad_manifest whose Field names
// the JSON path at fault. security_version is optional (absent means 0).
func ParseManifest(b []byte) (*Manifest, error) {
	var r rawManifest
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, refuseErr(ota.CodeBadManifest, jsonErrorField(err), "", err)
	}
	if dup := duplicateKey(b); dup != "" {
		return nil, refuse(ota.CodeBadManifest, dup, "key given twice (keys differing only in case count as one)")
	}
	var m Manifest
	for _, step := range []func(*rawManifest, *Manifest) error{parseIdentity, parseAudience, parseValidity, parsePayload} {
		if err := step(&r, &m); err != nil {
			return nil, err
		}
	}
	return &m, nil
}

// bad is a bad_manifest refusal naming field.
func bad(field, format string, args ...any) error {
	return refuse(ota.CodeBadManifest, field, fmt.Sprintf(format, args...))
}

// parseIdentity: schema, id, version, security_version.
func parseIdentity(r *rawManifest, m *Manifest) error {
	switch {
	case r.Schema == nil:
		return bad("schema", "missing")
	case *r.Schema > schemaChunked:
		return bad("schema", "version %d is newer than this agent understands (%d)", *r.Schema, schemaChunked)
	case *r.Schema < schemaStream:
		return bad("schema", "want %d or %d, got %d", schemaStream, schemaChunked, *r.Schema)
	}
	m.Schema = int(*r.Schema)

	if r.ID == nil {
		return bad("id", "missing")
	}
	if !idPattern.MatchString(*r.ID) {
		return bad("id", "want 1-128 characters of [A-Za-z0-9._-], got %q", truncate(*r.ID))
	}
	m.ID = *r.ID

	if r.Version == nil || strings.TrimSpace(*r.Version) == "" {
		return bad("version", "missing or empty")
	}
	if len(*r.Version) > maxVersionLen || !utf8.ValidString(*r.Version) || strings.ContainsFunc(*r.Version, isControl) {
		return bad("version", "want at most %d bytes of printable UTF-8", maxVersionLen)
	}
	m.Version = *r.Version

	if r.SecurityVersion != nil {
		m.SecurityVersion = *r.SecurityVersion
	}
	return nil
}

// parseAudience: compatible and devices.
func parseAudience(r *rawManifest, m *Manifest) error {
	if r.Compatible == nil || len(*r.Compatible) == 0 {
		return bad("compatible", "missing or empty")
	}
	if field, msg := checkList("compatible", *r.Compatible); field != "" {
		return bad(field, "%s", msg)
	}
	m.Compatible = *r.Compatible

	// An empty list would match no device; say so rather than silently never installing.
	if r.Devices != nil {
		if len(*r.Devices) == 0 {
			return bad("devices", "present but empty (omit it to target every device)")
		}
		if field, msg := checkList("devices", *r.Devices); field != "" {
			return bad(field, "%s", msg)
		}
		m.Devices = *r.Devices
	}
	return nil
}

// parseValidity: issued_at and expires_at.
func parseValidity(r *rawManifest, m *Manifest) error {
	var err error
	if m.IssuedAt, err = parseTime(r.IssuedAt); err != nil {
		return refuseErr(ota.CodeBadManifest, "issued_at", "", err)
	}
	if m.ExpiresAt, err = parseTime(r.ExpiresAt); err != nil {
		return refuseErr(ota.CodeBadManifest, "expires_at", "", err)
	}
	if !m.ExpiresAt.After(m.IssuedAt) {
		return bad("expires_at", "%s is not after issued_at %s", m.ExpiresAt.Format(time.RFC3339), m.IssuedAt.Format(time.RFC3339))
	}
	return nil
}

// parsePayload: size and sha256, then chunks (schema 2) or url,
// compression and download_size (schema 1).
func parsePayload(r *rawManifest, m *Manifest) error {
	if r.Payload == nil {
		return bad("payload", "missing")
	}
	p := r.Payload

	if p.Size == nil {
		return bad("payload.size", "missing")
	}
	if *p.Size <= 0 {
		return bad("payload.size", "want > 0, got %d", *p.Size)
	}
	m.Payload.Size = *p.Size

	if p.SHA256 == nil {
		return bad("payload.sha256", "missing")
	}
	if len(*p.SHA256) != 64 {
		return bad("payload.sha256", "want 64 hex digits, got %d characters", len(*p.SHA256))
	}
	if _, ok := ota.ParseSHA256(*p.SHA256); !ok {
		return bad("payload.sha256", "want 64 hex digits")
	}
	m.Payload.SHA256 = strings.ToLower(*p.SHA256)

	if m.Schema == schemaChunked {
		// chunks replaces url, compression and download_size, which are ignored.
		var err error
		m.Payload.Chunks, err = parseChunks(p.Chunks, m.Payload.Size)
		return err
	}
	return parseStream(p, m)
}

// parseStream: the schema 1 payload fields.
func parseStream(p *rawPayload, m *Manifest) error {
	if p.URL == nil {
		return bad("payload.url", "missing or empty")
	}
	if err := checkURL("payload.url", *p.URL); err != nil {
		return err
	}
	m.Payload.URL = *p.URL

	if p.Compression == nil {
		return bad("payload.compression", "missing")
	}
	if c := ota.Compression(*p.Compression); !c.Valid() {
		return bad("payload.compression", "want none, gzip, zstd or xz, got %q", truncate(*p.Compression))
	}
	m.Payload.Compression = ota.Compression(*p.Compression)

	if p.DownloadSize != nil {
		if *p.DownloadSize <= 0 {
			return bad("payload.download_size", "want > 0 when present, got %d", *p.DownloadSize)
		}
		// Uncompressed, the download is the slot image: any other size cannot succeed.
		if m.Payload.Compression == ota.CompressionNone && *p.DownloadSize != m.Payload.Size {
			return bad("payload.download_size", "%d differs from size %d with compression none", *p.DownloadSize, m.Payload.Size)
		}
		m.Payload.DownloadSize = *p.DownloadSize
	}
	return nil
}

func checkList(field string, list []string) (string, string) {
	if len(list) > maxListLen {
		return field, fmt.Sprintf("%d entries, at most %d allowed", len(list), maxListLen)
	}
	for i, s := range list {
		if s == "" {
			return fmt.Sprintf("%s[%d]", field, i), "empty"
		}
	}
	return "", ""
}

// parseTime accepts RFC 3339 with any offset and normalises to UTC.
func parseTime(s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, fmt.Errorf("missing")
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want RFC 3339: %w", err)
	}
	return t.UTC(), nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// truncate keeps hostile values from flooding logs and status messages.
func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
