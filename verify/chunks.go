package verify

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// Chunks describes a chunked payload (docs/contract/chunked.md, manifest schema 2); the type is
// the vocabulary's, so the agent's journal keeps it as the manifest says it.
type Chunks = ota.Chunks

type rawChunks struct {
	Size        *int64      `json:"size"`
	Count       *int64      `json:"count"`
	IndexURL    *string     `json:"index_url"`
	IndexSize   *int64      `json:"index_size"`
	IndexSHA256 *string     `json:"index_sha256"`
	StoreURL    *string     `json:"store_url"`
	StoreSize   *int64      `json:"store_size"`
	Compression *string     `json:"compression"`
	Chunking    *string     `json:"chunking"`
	Deltas      *[]rawDelta `json:"deltas"`
}

type rawDelta struct {
	From        *string `json:"from"`
	FromSize    *int64  `json:"from_size"`
	URL         *string `json:"url"`
	Size        *int64  `json:"size"`
	IndexSize   *int64  `json:"index_size"`
	IndexSHA256 *string `json:"index_sha256"`
	Count       *int64  `json:"count"`
	Fetch       *int64  `json:"fetch"`
	Placed      bool    `json:"placed"`
}

// maxDeltas bounds payload.chunks.deltas: one entry per older image a release
// offers deltas from.
const maxDeltas = 16

// Expect is what the index of chunked payload p is checked against (payload.ParseIndex).
func Expect(p *Payload) payload.Expect {
	c := p.Chunks
	return payload.Expect{
		ChunkSize: c.Size, ChunkCount: c.Count, ImageSize: p.Size,
		IndexSize: c.IndexSize, IndexSHA256: c.IndexSHA256, StoreSize: c.StoreSize,
		Compression: c.Compression, Chunking: c.Chunking,
	}
}

// DeltaExpect is what the delta index of payload.chunks.deltas[k] is checked against
// (payload.ParseDelta).
func DeltaExpect(p *Payload, k int) payload.DeltaExpect {
	return payload.DeltaExpectOf((*p.Chunks.Deltas)[k])
}

// parseChunks checks payload.chunks of a schema-2 manifest whose payload.size is size:
// every field present, URLs with a scheme (and a host for http/https), and the values
// agreeing with each other as payload.Expect.Validate requires.
func parseChunks(r *rawChunks, size int64) (*Chunks, error) {
	const at = "payload.chunks"
	if r == nil {
		return nil, refuse(ota.CodeBadManifest, at, "missing (schema 2 is a chunked payload)")
	}
	missing := func(name string) error { return refuse(ota.CodeBadManifest, at+"."+name, "missing") }
	var c Chunks
	for _, f := range []struct {
		name string
		src  *int64
		dst  *int64
	}{{"size", r.Size, &c.Size}, {"count", r.Count, &c.Count}, {"index_size", r.IndexSize, &c.IndexSize}, {"store_size", r.StoreSize, &c.StoreSize}} {
		if f.src == nil {
			return nil, missing(f.name)
		}
		*f.dst = *f.src
	}
	for _, f := range []struct {
		name string
		src  *string
		dst  *string
	}{{"index_url", r.IndexURL, &c.IndexURL}, {"store_url", r.StoreURL, &c.StoreURL}} {
		if f.src == nil {
			return nil, missing(f.name)
		}
		if err := checkURL(at+"."+f.name, *f.src); err != nil {
			return nil, err
		}
		*f.dst = *f.src
	}
	if r.IndexSHA256 == nil {
		return nil, missing("index_sha256")
	}
	if _, ok := ota.ParseSHA256(*r.IndexSHA256); !ok {
		return nil, refuse(ota.CodeBadManifest, at+".index_sha256", "want 64 hex digits")
	}
	c.IndexSHA256 = strings.ToLower(*r.IndexSHA256)
	if r.Compression == nil {
		return nil, missing("compression")
	}
	c.Compression = ota.Compression(*r.Compression)
	if r.Chunking != nil {
		c.Chunking = ota.Chunking(*r.Chunking)
	}
	p := Payload{Size: size, Chunks: &c}
	// The rules of the index format are payload's; only the code differs here.
	if err := Expect(&p).Validate(); err != nil {
		var e *ota.Error
		if errors.As(err, &e) {
			return nil, &ota.Error{Code: ota.CodeBadManifest, Field: e.Field, Err: e.Err}
		}
		return nil, refuseErr(ota.CodeBadManifest, at, "", err)
	}
	if r.Deltas != nil && len(*r.Deltas) > 0 {
		if err := parseDeltas(&c, *r.Deltas); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// parseDeltas checks payload.chunks.deltas into c: at most maxDeltas entries, every
// field present, one entry per older image, values as payload.DeltaExpect.Validate
// requires.
func parseDeltas(c *Chunks, list []rawDelta) error {
	const at = "payload.chunks.deltas"
	if len(list) > maxDeltas {
		return refuse(ota.CodeBadManifest, at, fmt.Sprintf("%d entries, at most %d allowed", len(list), maxDeltas))
	}
	seen := map[string]bool{}
	deltas := make([]ota.Delta, 0, len(list))
	c.Deltas = &deltas
	for k, r := range list {
		here := fmt.Sprintf("%s[%d]", at, k)
		d := ota.Delta{Placed: r.Placed}
		for _, f := range []struct {
			name string
			src  *int64
			dst  *int64
		}{{"from_size", r.FromSize, &d.FromSize}, {"size", r.Size, &d.Size}, {"index_size", r.IndexSize, &d.IndexSize}, {"count", r.Count, &d.Count}, {"fetch", r.Fetch, &d.Fetch}} {
			if f.src == nil {
				return refuse(ota.CodeBadManifest, here+"."+f.name, "missing")
			}
			*f.dst = *f.src
		}
		for _, f := range []struct {
			name string
			src  *string
			dst  *string
		}{{"from", r.From, &d.From}, {"index_sha256", r.IndexSHA256, &d.IndexSHA256}, {"url", r.URL, &d.URL}} {
			if f.src == nil {
				return refuse(ota.CodeBadManifest, here+"."+f.name, "missing")
			}
			*f.dst = *f.src
		}
		if err := checkURL(here+".url", d.URL); err != nil {
			return err
		}
		d.From, d.IndexSHA256 = strings.ToLower(d.From), strings.ToLower(d.IndexSHA256)
		if d.Fetch < 0 {
			return refuse(ota.CodeBadManifest, here+".fetch", fmt.Sprintf("%d is negative", d.Fetch))
		}
		if seen[d.From] {
			return refuse(ota.CodeBadManifest, here+".from", "an older image listed twice")
		}
		seen[d.From] = true
		deltas = append(deltas, d)
		if err := DeltaExpect(&Payload{Chunks: c}, k).Validate(here); err != nil {
			var e *ota.Error
			if errors.As(err, &e) {
				return &ota.Error{Code: ota.CodeBadManifest, Field: e.Field, Err: e.Err}
			}
			return refuseErr(ota.CodeBadManifest, here, "", err)
		}
	}
	return nil
}

// checkFromSizes refuses, with check 10's code, a deltas entry whose older image is
// larger than the slot (the A/B slots are one size): no booted slot of this device
// holds it, so the manifest is not for it. slot 0 is unknown: nothing to compare.
func checkFromSizes(c *Chunks, slot int64) error {
	if c == nil || c.Deltas == nil || slot <= 0 {
		return nil
	}
	for k, d := range *c.Deltas {
		if d.FromSize > slot {
			return refuse(ota.CodeTooBigForSlot, fmt.Sprintf("payload.chunks.deltas[%d].from_size", k),
				fmt.Sprintf("an older image of %d bytes, larger than the slot (%d bytes)", d.FromSize, slot))
		}
	}
	return nil
}

// checkURL refuses a URL a device could not fetch: unparsable, without a scheme, or
// http(s) without a host.
func checkURL(field, s string) error {
	if s == "" {
		return refuse(ota.CodeBadManifest, field, "missing or empty")
	}
	u, err := url.Parse(s)
	if err != nil {
		return refuseErr(ota.CodeBadManifest, field, "", err)
	}
	if u.Scheme == "" {
		return refuse(ota.CodeBadManifest, field, fmt.Sprintf("no scheme in %q", truncate(s)))
	}
	if (u.Scheme == "http" || u.Scheme == "https") && u.Host == "" {
		return refuse(ota.CodeBadManifest, field, fmt.Sprintf("no host in %q", truncate(s)))
	}
	return nil
}
