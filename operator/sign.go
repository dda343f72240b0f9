package operator

import (
	"context"
	"crypto"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/verify"
)

const defaultExpiry = 720 * time.Hour

type signOptions struct {
	keys            stringList
	image           string
	version         string
	compatible      stringList
	url             string
	compress        string
	set             map[string]bool // flags given on the command line
	outPayload      string
	chunked         bool
	chunkSize       string
	chunking        string
	deltaFrom       stringList
	securityVersion uint64
	expires         time.Duration
	devices         stringList
	id              string
	issuedAt        string
	progress        *signProgress // nil: stderr is no terminal
}

func sign(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o signOptions
	fset := o.flags(stderr)
	pos, err := parseFlags(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("unexpected arguments %q", pos)
	}
	o.set = map[string]bool{}
	fset.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	issuedAt, chunkSize, err := o.validate(time.Now())
	if err != nil {
		return err
	}

	signers := make([]crypto.Signer, 0, len(o.keys))
	for _, k := range o.keys {
		s, err := verify.LoadPrivateKeyFile(k)
		if err != nil {
			return err
		}
		signers = append(signers, s)
	}

	o.progress = newSignProgress(stderr, ota.IsTerminal(stderr), o.reading(), imageSize(o.image), time.Now)
	pl, err := o.payload(ctx, chunkSize, stderr)
	o.progress.finish()
	if err != nil {
		return err
	}
	m, manifest, env, err := o.envelope(issuedAt, pl, signers)
	if err != nil {
		return err
	}
	if _, err := stdout.Write(append(env, '\n')); err != nil {
		return fmt.Errorf("write envelope: %w", err)
	}
	io.WriteString(stderr, signSummary(m, manifest, o.outPayload))
	return nil
}

// flags is sign's flag set, bound to o.
func (o *signOptions) flags(stderr io.Writer) *flag.FlagSet {
	fset := newFlagSet("sign", "--key K --image IMG --version V --compatible C --url U [flags]", stderr)
	fset.Var(&o.keys, "key", "private key file (PEM); repeat to add signatures for a threshold")
	fset.StringVar(&o.image, "image", "", "image file: the exact bytes that land in the slot")
	fset.StringVar(&o.version, "version", "", "version for people, e.g. 4.2.0")
	fset.Var(&o.compatible, "compatible", "compatible string a device must have; repeatable")
	fset.StringVar(&o.url, "url", "", "where devices download the payload (with --chunked: URL.idx and URL.store)")
	fset.StringVar(&o.compress, "compress", string(ota.CompressionNone), "payload compression: none, gzip, zstd or xz (with --chunked: zstd-prefix, the default with --chunking cdc, zstd for devices older than zstd-prefix, or none)")
	fset.StringVar(&o.outPayload, "out-payload", "", "write the payload to upload here (required with --compress and --chunked: PATH.idx and PATH.store)")
	fset.BoolVar(&o.chunked, "chunked", false, "a chunked payload (manifest schema 2): devices check every chunk, resume, and fetch only what changed")
	fset.StringVar(&o.chunkSize, "chunk-size", "64KiB", "with --chunked: chunk size, a power of two from 4KiB to 4MiB (with cdc chunking the nominal size: chunks of a quarter to twice it)")
	fset.StringVar(&o.chunking, "chunking", string(ota.ChunkingCDC), "with --chunked: cdc (content-defined chunks: reuse survives moved files) or fixed (every chunk --chunk-size bytes, for devices older than cdc)")
	fset.Var(&o.deltaFrom, "delta-from", "with --chunked: older image(s) devices may hold, comma-separated or repeated: writes PATH.from-<sha256 prefix>.delta with a delta of each chunk they lack")
	fset.Uint64Var(&o.securityVersion, "security-version", 0, "anti-rollback counter")
	fset.DurationVar(&o.expires, "expires", defaultExpiry, "validity after issued_at")
	fset.Var(&o.devices, "device", "limit the offer to this device ID; repeatable")
	fset.StringVar(&o.id, "id", "", `manifest id, a name for people (default "<version>-<12 hex of a digest of the image's sha256 and issued_at>": each signature its own)`)
	fset.StringVar(&o.issuedAt, "issued-at", "", "issued_at, RFC 3339 (default now)")
	return fset
}

// envelope writes the manifest of pl and signs it with every key: what a
// device would refuse is refused here, naming the field.
func (o *signOptions) envelope(issuedAt time.Time, pl verify.Payload, signers []crypto.Signer) (verify.Manifest, []byte, []byte, error) {
	schema := 1
	if o.chunked {
		schema = 2
	}
	m := verify.Manifest{
		Schema:          schema,
		ID:              o.id,
		Version:         o.version,
		SecurityVersion: o.securityVersion,
		Compatible:      o.compatible,
		Devices:         o.devices,
		IssuedAt:        issuedAt,
		ExpiresAt:       issuedAt.Add(o.expires),
		Payload:         pl,
	}
	if m.ID == "" {
		m.ID = defaultID(o.version, pl.SHA256, issuedAt)
	}
	manifest, err := json.Marshal(m)
	if err != nil {
		return verify.Manifest{}, nil, nil, fmt.Errorf("marshal manifest: %w", err)
	}
	// Devices would refuse a bad manifest; say so here, naming the field, not after a rollout.
	if _, err := verify.ParseManifest(manifest); err != nil {
		return verify.Manifest{}, nil, nil, usagef("the manifest would be refused: %w", err)
	}
	sigs := make([]verify.Signature, 0, len(signers))
	for i, s := range signers {
		sig, err := verify.SignManifest(manifest, s)
		if err != nil {
			return verify.Manifest{}, nil, nil, fmt.Errorf("%s: %w", o.keys[i], err)
		}
		sigs = append(sigs, sig)
	}
	env, err := verify.MarshalEnvelope(manifest, sigs...)
	if err != nil {
		return verify.Manifest{}, nil, nil, err
	}
	return m, manifest, env, nil
}

// payload writes what is to be uploaded and describes it for the manifest.
func (o *signOptions) payload(ctx context.Context, chunkSize int64, stderr io.Writer) (verify.Payload, error) {
	if o.chunked {
		return o.chunkedPayload(ctx, chunkSize, stderr)
	}
	p, err := preparePayload(ctx, o.image, o.compress, o.outPayload, o.progress)
	if err != nil {
		return verify.Payload{}, err
	}
	return verify.Payload{
		URL:          o.url,
		Compression:  ota.Compression(o.compress),
		Size:         p.size,
		SHA256:       p.sha256,
		DownloadSize: p.downloadSize,
	}, nil
}

// chunkedPayload writes PATH.idx, PATH.store and, with --delta-from, a delta file
// per older image, and describes them for the manifest.
func (o *signOptions) chunkedPayload(ctx context.Context, chunkSize int64, stderr io.Writer) (verify.Payload, error) {
	co := chunkedOpts{chunkSize: chunkSize, comp: ota.Compression(o.compress), chunking: ota.Chunking(o.chunking), progress: o.progress}
	olds := splitList(o.deltaFrom)
	// Before the store is built (minutes at 1 GiB): a wrong older image fails now.
	if err := checkOlderImages(olds); err != nil {
		return verify.Payload{}, err
	}
	var sizer *streamSizer
	if len(olds) > 0 {
		var err error
		if sizer, err = newStreamSizer(); err != nil {
			return verify.Payload{}, err
		}
		co.stream = sizer
	}
	var files pending
	defer func() { files.abort() }()
	res, err := prepareChunked(ctx, o.image, o.outPayload, co, &files)
	if err != nil {
		return verify.Payload{}, err
	}
	reportChunked(stderr, o.outPayload, res)
	pl := chunkedPayload(res, o.url)
	if len(olds) > 0 {
		stream, err := sizer.size()
		if err != nil {
			return verify.Payload{}, fmt.Errorf("image %s: zstd: %w", o.image, err)
		}
		deltas, err := buildDeltas(ctx, deltaJob{image: o.image, out: o.outPayload, url: o.url, res: res, stream: stream, olds: olds}, &files, stderr)
		if err != nil {
			return verify.Payload{}, err
		}
		if len(deltas) > 0 {
			pl.Chunks.Deltas = &deltas
		}
	}
	return pl, files.commit()
}

// validate checks the flags and returns issued_at and, with --chunked, the chunk size.
func (o *signOptions) validate(now time.Time) (time.Time, int64, error) {
	missing := []string{}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"--key", len(o.keys) > 0}, {"--image", o.image != ""}, {"--version", o.version != ""},
		{"--compatible", len(o.compatible) > 0}, {"--url", o.url != ""},
	} {
		if !f.set {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return time.Time{}, 0, usagef("missing %s", strings.Join(missing, ", "))
	}
	chunkSize, err := o.checkChunked()
	if err != nil {
		return time.Time{}, 0, err
	}
	switch ota.Compression(o.compress) {
	case ota.CompressionNone:
	case ota.CompressionZstdPrefix:
		if !o.chunked {
			return time.Time{}, 0, usagef("--compress zstd-prefix needs --chunked: a stream is compressed whole")
		}
	case ota.CompressionGzip, ota.CompressionZstd, ota.CompressionXZ:
		if o.outPayload == "" {
			return time.Time{}, 0, usagef("--compress %s needs --out-payload (where to write the compressed payload)", o.compress)
		}
	default:
		return time.Time{}, 0, usagef("--compress %q: want none, gzip, zstd or xz", o.compress)
	}
	if o.expires <= 0 {
		return time.Time{}, 0, usagef("--expires %s: want a positive duration", o.expires)
	}
	issuedAt := now.UTC() // sub-second precision: two offers signed within one second still order (check 9)
	if o.issuedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, o.issuedAt)
		if err != nil {
			return time.Time{}, 0, usagef("--issued-at: want RFC 3339: %w", err)
		}
		issuedAt = t.UTC()
	}
	if exp := issuedAt.Add(o.expires); !exp.After(now) {
		return time.Time{}, 0, usagef("expires_at %s (--issued-at %s + --expires %s) is already past: every device would refuse the offer (expired); give a later --issued-at or a longer --expires",
			exp.Format(time.RFC3339), issuedAt.Format(time.RFC3339), o.expires)
	}
	// What no device would take: a scheme none can be configured for, a
	// device ID none can have.
	if u, err := url.Parse(o.url); err == nil && u.Scheme != "" && !slices.Contains(ota.Schemes(), u.Scheme) { // else the manifest check names payload.url
		return time.Time{}, 0, usagef("--url %q: devices fetch only %s URLs (url_not_allowed)", o.url, strings.Join(ota.Schemes(), ", "))
	}
	for _, d := range o.devices {
		if err := mqtt.CheckName(d); err != nil {
			return time.Time{}, 0, usagef("--device: %w", err)
		}
	}
	return issuedAt, chunkSize, nil
}

// reading is what signing does with the image as it reads it, for the progress line.
func (o *signOptions) reading() string {
	switch {
	case o.chunked:
		return "chunking (" + o.compress + ")"
	case o.outPayload != "" && o.compress != string(ota.CompressionNone):
		return "hashing and compressing (" + o.compress + ")"
	}
	return "hashing"
}

// imageSize is the image's size, 0 when it cannot be known (a pipe, an
// error reported when it is read).
func imageSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return 0
	}
	return st.Size()
}

// checkChunked checks the flags of a chunked payload and returns the chunk size; for
// a chunked payload the compression defaults to zstd.
func (o *signOptions) checkChunked() (int64, error) {
	if !o.chunked {
		for _, f := range []string{"chunk-size", "chunking", "delta-from"} {
			if o.set[f] {
				return 0, usagef("--%s needs --chunked", f)
			}
		}
		return 0, nil
	}
	if c := ota.Chunking(o.chunking); c != ota.ChunkingCDC && c != ota.ChunkingFixed {
		return 0, usagef("--chunking %q: want cdc or fixed", o.chunking)
	}
	if o.outPayload == "" {
		return 0, usagef("--chunked needs --out-payload PATH (where to write PATH.idx and PATH.store)")
	}
	if !o.set["compress"] {
		// Each chunk compressed with the bytes before it: as small as the stream
		// (docs/contract/chunked.md); fixed chunks are for older devices, which
		// know zstd only.
		o.compress = string(ota.CompressionZstdPrefix)
		if ota.Chunking(o.chunking) == ota.ChunkingFixed {
			o.compress = string(ota.CompressionZstd)
		}
	}
	switch c := ota.Compression(o.compress); {
	case c == ota.CompressionZstdPrefix && ota.Chunking(o.chunking) == ota.ChunkingFixed:
		return 0, usagef("--chunked --compress zstd-prefix needs --chunking cdc")
	case c != ota.CompressionZstd && c != ota.CompressionNone && c != ota.CompressionZstdPrefix:
		return 0, usagef("--chunked --compress %q: chunks are stored zstd-compressed or raw: want zstd-prefix, zstd or none", o.compress)
	}
	n, err := cli.ParseBytes(o.chunkSize)
	if err != nil {
		return 0, usagef("--chunk-size %w", err)
	}
	if !payload.ValidChunkSize(n) {
		return 0, usagef("--chunk-size %s: want a power of two from 4KiB to 4MiB", o.chunkSize)
	}
	return n, nil
}

// defaultID is "<version>-<12 hex>", with characters the id syntax does not allow
// (SemVer "+build", spaces) replaced by "-". The hex digits are of a digest of
// the image's sha256 and issued_at, so each signature has its own id: the same
// image signed again after a failure is another offer and reads as one.
func defaultID(version, sha string, issuedAt time.Time) string {
	suffix := "-" + digestOf([]byte(sha + " " + issuedAt.UTC().Format(time.RFC3339Nano)))[:12]
	v := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, version)
	if max := 128 - len(suffix); len(v) > max {
		v = v[:max]
	}
	return v + suffix
}
