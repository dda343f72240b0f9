package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// otactl signs the payloads with the real otactl, a throwaway key made by
// `otactl keygen`, and writes them where the payload server serves them.
type otactl struct {
	bin, key string
	pub      []byte
	srvDir   string // served at url
	url      string
	offers   string // where the envelopes go
	r        runner
	// delta says this otactl's sign takes --delta-from (per-chunk deltas
	// against the booted image); builds before the delta feature do not.
	delta bool
	// chunking says it takes --chunking (fixed or content-defined chunks).
	chunking bool
}

func newOtactl(ctx context.Context, bin, dir, srvDir, url string, r runner) (*otactl, error) {
	c := &otactl{bin: bin, key: filepath.Join(dir, "release.key"), srvDir: srvDir, url: url, offers: dir, r: r}
	if err := r.run(ctx, time.Minute, bin, "keygen", filepath.Join(dir, "release")); err != nil {
		return nil, err
	}
	var err error
	if c.pub, err = os.ReadFile(filepath.Join(dir, "release.pub")); err != nil {
		return nil, err
	}
	help, err := signHelp(ctx, bin)
	if err != nil {
		return nil, err
	}
	c.delta, c.chunking = helpLists(help, "delta-from"), helpLists(help, "chunking")
	return c, nil
}

// signHelp is what `otactl sign --help` prints.
func signHelp(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "sign", "--help")
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // help may exit non-zero; what it printed says
	if !helpLists(out.String(), "chunked") {
		return "", fmt.Errorf("%s sign --help does not look like otactl's:\n%s", bin, out.String())
	}
	return out.String(), nil
}

// helpLists says whether a flag package usage text lists -name.
func helpLists(help, name string) bool {
	for line := range strings.SplitSeq(help, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "-"+name || f[0] == "--"+name) {
			return true
		}
	}
	return false
}

// sign signs image as NAME (the payload at URL/NAME, written to
// SRVDIR/NAME), issued at issued, with the payload flags extra, and
// returns the envelope's path.
func (c *otactl) sign(ctx context.Context, name, image, version string, issued time.Time, extra ...string) (string, error) {
	env := filepath.Join(c.offers, name+".offer.json")
	f, err := os.Create(env)
	if err != nil {
		return "", err
	}
	defer f.Close()
	args := append([]string{"sign", "--key", c.key, "--image", image, "--version", version, "--compatible", compatible,
		"--url", c.url + "/" + name, "--out-payload", filepath.Join(c.srvDir, name), "--security-version", "1",
		"--issued-at", issued.UTC().Format(time.RFC3339)}, extra...)
	if _, err := c.r.output(ctx, time.Hour, f, c.bin, args...); err != nil {
		return "", err
	}
	return env, f.Close()
}

// payloadSize is what NAME's payload takes on the server: every file
// SRVDIR/NAME or SRVDIR/NAME.*.
func (c *otactl) payloadSize(name string) (int64, error) {
	m, err := filepath.Glob(filepath.Join(c.srvDir, name+"*"))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range m {
		if b := filepath.Base(f); b != name && !strings.HasPrefix(b, name+".") {
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return 0, err
		}
		if st.Mode().IsRegular() {
			n += st.Size()
		}
	}
	return n, nil
}
