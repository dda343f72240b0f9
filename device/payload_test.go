package device

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
)

// unreachable is a payload URL nothing answers: the offer was signed for a
// server this device cannot reach (an air-gapped site, a USB stick's copy).
const unreachable = "http://127.0.0.1:1/rootfs.img"

// hits is every request the testbed's image server answered.
func hits(tb *devicetest.Testbed, names ...string) int {
	n := 0
	for _, name := range names {
		n += tb.Hits(name)
	}
	return n
}

// Issue 17: otad install --payload stages an offer signed with an
// unreachable URL from a local file, in this process and through the daemon
// (the file passed over the control socket), stream and chunked payloads; the
// signed size and hashes still bind the bytes.
func TestInstallPayloadFromLocalFile(t *testing.T) {
	for _, c := range []struct {
		name    string
		daemon  bool
		chunked bool
	}{{"stream, in-process", false, false}, {"stream, through the daemon", true, false},
		{"chunked, in-process", false, true}, {"chunked, through the daemon", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
			dir := t.TempDir()
			img := devicetest.RandBytes(7, devicetest.ImageSize)
			env, sum := tb.Offer("usb", 7, devicetest.OfferOpts{Image: img, URL: unreachable, Chunked: c.chunked})
			local := filepath.Join(dir, "rootfs.img")
			if c.chunked {
				// What otactl sign --chunked --out-payload wrote: PATH.idx, PATH.store.
				for _, ext := range []string{".idx", ".store"} {
					devicetest.Must(t, os.WriteFile(local+ext, get(t, tb.Srv.URL+"/usb"+ext), 0o600))
				}
			} else {
				devicetest.Must(t, os.WriteFile(local, img, 0o600))
			}
			before := hits(tb, "usb", "usb.idx", "usb.store")
			if c.daemon {
				startDaemon(t, tb.Cfg.Path)
			}
			code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, "--payload", local, writeEnv(t, env))
			if code != 0 || !strings.Contains(stdout, "staged rel-usb") {
				t.Fatalf("install --payload: exit %d\n%s%s", code, stdout, stderr)
			}
			if devicetest.FileSHA(t, tb.Cfg.Slots.B, int64(len(img))) != sum {
				t.Fatal("slot B does not hold the image")
			}
			if n := hits(tb, "usb", "usb.idx", "usb.store"); n != before {
				t.Errorf("the image server was asked %d times: the payload came from it, not the file", n-before)
			}
		})
	}
}

// A file that is not the signed image fails as a wrong download does, and a
// URL given instead of the signed one is fetched from.
func TestInstallPayloadBound(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	img := devicetest.RandBytes(8, devicetest.ImageSize)
	env, _ := tb.Offer("moved", 8, devicetest.OfferOpts{Image: img, URL: unreachable})
	wrong := filepath.Join(t.TempDir(), "other.img")
	other := bytes.Clone(img)
	other[len(other)/3] ^= 1
	devicetest.Must(t, os.WriteFile(wrong, other, 0o600))
	if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, "--payload", wrong, writeEnv(t, env)); code != 1 || !strings.Contains(stderr, "hash_mismatch") {
		t.Fatalf("a wrong file: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := otad(t, "install", "-c", tb.Cfg.Path, "--payload", filepath.Join(t.TempDir(), "none"), writeEnv(t, env)); code != 2 || !strings.Contains(stderr, "no such file") {
		t.Fatalf("a missing file: exit %d %s", code, stderr)
	}
	// The same image on another server than the signed one.
	env2, _ := tb.Offer("mirror", 8, devicetest.OfferOpts{Image: img, URL: unreachable, Issued: time.Now().Add(time.Second)})
	if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, "--payload", tb.Srv.URL+"/mirror", writeEnv(t, env2)); code != 0 || tb.Hits("mirror") == 0 {
		t.Fatalf("install --payload URL: exit %d, %d requests\n%s%s", code, tb.Hits("mirror"), stdout, stderr)
	}
}

// Issue 17: otad info runs every offer check against this device and the
// agent's own step, fetching nothing: exit 0 for a good offer, 3 with the
// code for each refusal, and what the agent would do with it.
func TestInfo(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	cfg := tb.Cfg.Path
	good, _ := tb.Offer("good", 2, devicetest.OfferOpts{Device: "gw-0001"})
	other, err := signer.New()
	devicetest.Must(t, err)
	sum := sha256.Sum256(devicetest.RandBytes(3, 1000))
	wrongKey, err := other.Sign(signer.Offer{ID: "rel-evil", Version: "6.6.6", Compatible: "acme,gw-v2", URL: tb.Srv.URL + "/evil", Size: 1000, SHA256: hex.EncodeToString(sum[:])})
	devicetest.Must(t, err)
	expired, _ := tb.Offer("old", 4, devicetest.OfferOpts{Issued: time.Now().Add(-72 * time.Hour)})
	incompatible, _ := tb.Offer("x", 5, devicetest.OfferOpts{Compat: "acme,other"})
	elsewhere, _ := tb.Offer("y", 6, devicetest.OfferOpts{Device: "gw-9999"})
	tooBig, _ := tb.Offer("big", 9, devicetest.OfferOpts{Size: 1 << 40})
	chunked, _ := tb.Offer("ch", 10, devicetest.OfferOpts{Chunked: true})
	served := []string{"good", "old", "x", "y", "big", "ch.idx", "ch.store", "evil"}
	for _, c := range []struct {
		name   string
		env    []byte
		code   int
		stdout []string
		stderr string
	}{
		{"good", good, 0, []string{"offer:     rel-good, version good", "for:       compatible acme,gw-v2; gw-0001", "verdict:   would install into slot B"}, ""},
		{"chunked", chunked, 0, []string{"chunked: ", "verdict:   would install into slot B"}, ""},
		{"wrong key", wrongKey, 3, []string{"offer:     rel-evil"}, "would be refused: bad_signature"},
		{"expired", expired, 3, nil, "would be refused: expired"},
		{"incompatible", incompatible, 3, nil, "would be refused: incompatible"},
		{"another device's", elsewhere, 3, nil, "would be refused: not_for_this_device"},
		{"too big for the slot", tooBig, 3, nil, "would be refused: too_big_for_slot"},
		{"not an envelope", []byte(`{"manifest": 1}`), 3, nil, "would be refused: bad_envelope"},
	} {
		code, stdout, stderr := otad(t, "info", "-c", cfg, writeEnv(t, c.env))
		if code != c.code || !strings.Contains(stderr, c.stderr) || (c.stderr == "") != (stderr == "") {
			t.Errorf("%s: exit %d, want %d\n%s%s", c.name, code, c.code, stdout, stderr)
		}
		for _, w := range c.stdout {
			if !strings.Contains(stdout, w) {
				t.Errorf("%s: stdout lacks %q:\n%s", c.name, w, stdout)
			}
		}
	}
	// Issue 31: --json says the same as one object.
	for _, c := range []struct {
		env     []byte
		code    int
		verdict string
		refusal ota.Code
		id      string
	}{{good, 0, "install", "", "rel-good"}, {expired, 3, "refused", ota.CodeExpired, "rel-old"}} {
		code, stdout, stderr := otad(t, "info", "--json", "-c", cfg, writeEnv(t, c.env))
		var r struct {
			Offer struct {
				ID      string      `json:"id"`
				Payload ota.Payload `json:"payload"`
			} `json:"offer"`
			Verdict string   `json:"verdict"`
			Code    ota.Code `json:"code"`
			Exit    int      `json:"exit"`
		}
		if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != c.code || r.Exit != c.code || r.Verdict != c.verdict || r.Code != c.refusal || r.Offer.ID != c.id || r.Offer.Payload.Size == 0 {
			t.Errorf("info --json %s: exit %d, %+v (%v)\n%s%s", c.id, code, r, err, stdout, stderr)
		}
	}
	if n := hits(tb, served...); n != 0 {
		t.Fatalf("otad info made %d HTTP requests", n)
	}
	// Installed: the same offer is the install in progress, a newer one
	// would wait for it, the refusals are the same.
	if code, _, stderr := otad(t, "install", "-c", cfg, writeEnv(t, good)); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	newer, _ := tb.Offer("newer", 11, devicetest.OfferOpts{Issued: time.Now().Add(time.Second)})
	before := hits(tb, append(served, "newer")...)
	for _, c := range []struct {
		env  []byte
		want string
	}{{good, "is the install in progress"}, {newer, "would wait as pending until rel-good is settled (staged)"}} {
		if code, stdout, stderr := otad(t, "info", "-c", cfg, writeEnv(t, c.env)); code != 0 || !strings.Contains(stdout, c.want) {
			t.Errorf("info after the install: exit %d, want %q\n%s%s", code, c.want, stdout, stderr)
		}
	}
	if code, _, stderr := otad(t, "info", "-c", cfg, writeEnv(t, expired)); code != 3 || !strings.Contains(stderr, "expired") {
		t.Errorf("expired after the install: exit %d %s", code, stderr)
	}
	if n := hits(tb, append(served, "newer")...); n != before {
		t.Fatalf("otad info made %d HTTP requests", n-before)
	}
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	devicetest.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	devicetest.Must(t, err)
	return b
}

// startDaemon runs otad run on cfg until the test ends, waiting until its
// control socket answers.
func startDaemon(t *testing.T, cfg string) {
	t.Helper()
	d := exec.Command(otadBin, "run", "-c", cfg)
	var log bytes.Buffer
	d.Stderr = &log
	devicetest.Must(t, d.Start())
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	for i := 0; ; i++ {
		if code, out, _ := otad(t, "status", "-c", cfg); code == 0 && !strings.Contains(out, "daemon:      not running") {
			return
		}
		if i > 400 {
			t.Fatalf("daemon did not come up: %s", log.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Issue 27: the files of --payload are named as given, in this process and
// to the daemon: errors name them so (docs/contract/commands.md).
func TestGivenPayloadNames(t *testing.T) {
	t.Chdir(t.TempDir())
	devicetest.Must(t, os.WriteFile("trunc.img", []byte("x"), 0o600))
	g, err := payloadFor("trunc.img", []byte("{}"))
	devicetest.Must(t, err)
	defer g.close()
	src := g.source()
	if name := src.Names[src.URL]; name != "trunc.img" {
		t.Errorf("in process, %s is named %q, want trunc.img", src.URL, name)
	}
	if p, _ := g.control(); len(p.Paths) != 1 || p.Paths[0] != "trunc.img" {
		t.Errorf("to the daemon, the file is named %q, want trunc.img", p.Paths)
	}
}
