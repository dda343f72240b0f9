package node

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/backoff"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/statelock"
	"github.com/otad/otad/fetch"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/verify"
)

var update = flag.Bool("update", false, "rewrite the table in docs/adversarial.md from the suite")

// attack is one class of hostile input and what the device answers: a code
// of docs/contract/checks.md or docs/contract/installing.md, or an outcome that is not a code.
type attack struct {
	category, class, want string
	run                   func(s *suite) string
}

// Outcomes that are not codes.
const (
	answerOK           = "ok"
	answerIgnored      = "ignored (already ended)"
	answerKept         = "last_result kept"
	answerDropped      = "dropped unread, too_large"
	answerRefused      = "refused to start"
	answerConfig       = "config error"
	answerFailedCheck  = "health_check_failed"
	answerNeedOperator = "exit 5 with the fix"
)

func attacks() []attack {
	m := func(edit func(map[string]any)) func(s *suite) string {
		return func(s *suite) string { return s.check(s.env(s.manifest(edit), s.rel.Key)) }
	}
	signed := func(raw func(s *suite) []byte) func(s *suite) string {
		return func(s *suite) string { return s.check(s.env(raw(s), s.rel.Key)) }
	}
	envelope := func(raw func(s *suite) []byte) func(s *suite) string {
		return func(s *suite) string { return s.check(raw(s)) }
	}
	good := func(s *suite) []byte { return s.manifest(nil) }
	payload := func(path string, comp ota.Compression) func(s *suite) string {
		return func(s *suite) string { return s.write(s.srv.URL+path, comp, nil, nil) }
	}
	return []attack{
		{"signature", "no signatures", string(ota.CodeBadEnvelope), envelope(func(s *suite) []byte {
			return []byte(`{"manifest":"` + base64.StdEncoding.EncodeToString(good(s)) + `","signatures":[]}`)
		})},
		{"signature", "signed by an untrusted key", string(ota.CodeBadSignature), func(s *suite) string { return s.check(s.env(good(s), s.other)) }},
		{"signature", "signature bytes flipped", string(ota.CodeBadSignature), envelope(func(s *suite) []byte {
			sig, _ := verify.SignManifest(good(s), s.rel.Key)
			sig.Sig[len(sig.Sig)/2] ^= 1
			env, _ := verify.MarshalEnvelope(good(s), sig)
			return env
		})},
		{"signature", "valid signature over another manifest", string(ota.CodeBadSignature), envelope(func(s *suite) []byte {
			sig, _ := verify.SignManifest(s.manifest(func(m map[string]any) { m["version"] = "other" }), s.rel.Key)
			env, _ := verify.MarshalEnvelope(good(s), sig)
			return env
		})},
		{"signature", "trusted keyid on an untrusted signature", string(ota.CodeBadSignature), envelope(func(s *suite) []byte {
			sig, _ := verify.SignManifest(good(s), s.other)
			sig.KeyID, _ = verify.KeyID(s.rel.Key.Public())
			env, _ := verify.MarshalEnvelope(good(s), sig)
			return env
		})},
		{"signature", "threshold 2 met by one key signing twice", string(ota.CodeBadSignature), func(s *suite) string {
			s.chk.policy.Threshold = 2
			defer func() { s.chk.policy.Threshold = 1 }()
			return s.check(s.env(good(s), s.rel.Key, s.rel.Key))
		}},
		{"signature", "signature not base64", string(ota.CodeBadEnvelope), envelope(func(s *suite) []byte {
			return []byte(`{"manifest":"` + base64.StdEncoding.EncodeToString(good(s)) + `","signatures":[{"sig":"%%%"}]}`)
		})},
		{"signature", "33 signatures (work bound)", string(ota.CodeBadEnvelope), func(s *suite) string {
			signers := make([]crypto.Signer, 33)
			for i := range signers {
				signers[i] = s.other
			}
			return s.check(s.env(good(s), signers...))
		}},
		{"signature", "signing key removed from the trust directory", string(ota.CodeBadSignature), func(s *suite) string {
			kr := s.chk.keys.cur.Swap(&Trusted{Keyring: verify.NewKeyring()})
			defer s.chk.keys.cur.Store(kr)
			return s.check(s.env(good(s), s.rel.Key))
		}},
		{"parsing", "envelope over 256 KiB", string(ota.CodeTooLarge), envelope(func(*suite) []byte { return bytes.Repeat([]byte(" "), 256<<10+1) })},
		{"parsing", "envelope not JSON", string(ota.CodeBadEnvelope), envelope(func(*suite) []byte { return []byte("}garbage{") })},
		{"parsing", "envelope with \"manifest\" and \"Manifest\"", string(ota.CodeBadEnvelope), envelope(func(s *suite) []byte {
			return bytes.Replace(s.env(good(s), s.rel.Key), []byte(`{"manifest":`), []byte(`{"Manifest":"e30=","manifest":`), 1)
		})},
		{"parsing", "manifest not base64", string(ota.CodeBadEnvelope), envelope(func(*suite) []byte {
			return []byte(`{"manifest":"not base64!","signatures":[{"sig":"AQ=="}]}`)
		})},
		{"parsing", "signed manifest not JSON", string(ota.CodeBadManifest), signed(func(*suite) []byte { return []byte("not json") })},
		{"parsing", "duplicate key in the manifest", string(ota.CodeBadManifest), signed(func(s *suite) []byte {
			return bytes.Replace(good(s), []byte(`"devices":`), []byte(`"devices":["gw-9"],"devices":`), 1)
		})},
		{"parsing", "\"devices\" and \"DEVICES\"", string(ota.CodeBadManifest), signed(func(s *suite) []byte {
			return bytes.Replace(good(s), []byte(`"devices":["gw-1"]`), []byte(`"devices":["gw-9"],"DEVICES":["gw-1"]`), 1)
		})},
		{"parsing", "schema from the future", string(ota.CodeBadManifest), m(func(m map[string]any) { m["schema"] = 99 })},
		{"parsing", "sha256 not hex", string(ota.CodeBadManifest), m(func(m map[string]any) { pay(m)["sha256"] = strings.Repeat("z", 64) })},
		{"parsing", "id with path characters", string(ota.CodeBadManifest), m(func(m map[string]any) { m["id"] = "../../etc/passwd" })},
		{"parsing", "negative size", string(ota.CodeBadManifest), m(func(m map[string]any) { pay(m)["size"] = -1 })},
		{"parsing", "expires before issued", string(ota.CodeBadManifest), m(func(m map[string]any) { m["expires_at"] = "2020-01-01T00:00:00Z" })},
		{"parsing", "nesting 10000 deep", string(ota.CodeBadManifest), signed(func(s *suite) []byte {
			return bytes.Replace(good(s), []byte(`"version":`), []byte(`"x":`+strings.Repeat("[", 10000)+strings.Repeat("]", 10000)+`,"version":`), 1)
		})},
		{"parsing", "control characters in version", string(ota.CodeBadManifest), m(func(m map[string]any) { m["version"] = "1.0\x1b[2J" })},
		{"policy", "other compatible", string(ota.CodeIncompatible), m(func(m map[string]any) { m["compatible"] = []any{"acme,other"} })},
		{"policy", "other device", string(ota.CodeNotForThisDevice), m(func(m map[string]any) { m["devices"] = []any{"gw-9"} })},
		{"policy", "expired", string(ota.CodeExpired), m(expires(-time.Hour))},
		{"policy", "expired, device clock at 1970 (no RTC)", string(ota.CodeExpired), func(s *suite) string {
			s.chk.clock = fixedClock(time.Unix(0, 0))
			defer func() { s.chk.clock = fixedClock(fuzzNow) }()
			return s.checkWith(s.env(s.manifest(expires(-time.Hour)), s.rel.Key), agent.Facts{InactiveSlot: "B", ClockFloor: fuzzNow})
		}},
		{"policy", "issued in 2099", string(ota.CodeNotYetValid), m(func(m map[string]any) {
			m["issued_at"], m["expires_at"] = "2099-01-01T00:00:00Z", "2099-02-01T00:00:00Z"
		})},
		{"policy", "security_version below the floor", string(ota.CodeDowngrade), func(s *suite) string {
			return s.checkWith(s.env(good(s), s.rel.Key), agent.Facts{InactiveSlot: "B", SecurityFloor: 9})
		}},
		{"policy", "older than the newest accepted", string(ota.CodeStale), func(s *suite) string {
			return s.checkWith(s.env(good(s), s.rel.Key), agent.Facts{InactiveSlot: "B", NewestIssuedAt: fuzzNow})
		}},
		{"policy", "bigger than the slot", string(ota.CodeTooBigForSlot), m(func(m map[string]any) { pay(m)["size"] = 2 << 20 })},
		{"policy", "plain http when https only", string(ota.CodeURLNotAllowed), m(func(m map[string]any) { pay(m)["url"] = "http://u/img" })},
		{"policy", "file:// URL", string(ota.CodeURLNotAllowed), m(func(m map[string]any) { pay(m)["url"] = "file:///dev/mmcblk0" })},
		{"policy", "failed offer redelivered after a refusal", answerIgnored, func(s *suite) string {
			o := newOfferPath(s.t, s.rel)
			o.deliver(s.x, false)
			o.deliver([]byte("}garbage{"), false)
			o.deliver(s.x, false) // the offer path fails the test if x starts again
			if _, ok := endedIn(o.s, s.x); ok {
				return answerIgnored
			}
			return "not remembered"
		}},
		{"policy", "flood of refused messages", answerKept, func(s *suite) string {
			o := newOfferPath(s.t, s.rel)
			o.deliver(s.x, false)
			for range 100 {
				o.deliver([]byte("}garbage{"), false)
			}
			if r := o.s.LastResult; r != nil && r.Result == ota.ResultFailed && o.s.LastRefusal != nil {
				return answerKept
			}
			return fmt.Sprint(o.s.LastResult)
		}},
		{"payload", "tampered bytes", string(ota.CodeHashMismatch), payload("/tampered", ota.CompressionNone)},
		{"payload", "truncated", string(ota.CodeSizeMismatch), payload("/short", ota.CompressionNone)},
		{"payload", "longer than size", string(ota.CodeSizeMismatch), payload("/long", ota.CompressionNone)},
		{"payload", "xz declaring a 4 GiB dictionary", string(ota.CodeDownloadFailed), payload("/xz-dict", ota.CompressionXZ)},
		{"payload", "zstd declaring a 2 GiB window", string(ota.CodeDownloadFailed), payload("/zstd-window", ota.CompressionZstd)},
		{"payload", "endless empty gzip members", string(ota.CodeDownloadFailed), payload("/gzip-forever", ota.CompressionGzip)},
		{"payload", "not the declared compression", string(ota.CodeDownloadFailed), payload("/img", ota.CompressionGzip)},
		{"payload", "HTTP 404", string(ota.CodeDownloadFailed), payload("/missing", ota.CompressionNone)},
		{"transport", "redirect from https to http", string(ota.CodeDownloadFailed), func(s *suite) string {
			return s.write(s.tls.URL+"/to-http", ota.CompressionNone, s.tls.Client(), []string{"https"})
		}},
		{"transport", "endless redirects", string(ota.CodeDownloadFailed), func(s *suite) string {
			return s.write(s.srv.URL+"/loop/0", ota.CompressionNone, nil, []string{"http"})
		}},
		{"transport", "server certificate from an unknown CA", string(ota.CodeDownloadFailed), func(s *suite) string {
			return s.write(s.tls.URL+"/img", ota.CompressionNone, fetch.NewHTTPClient(nil), []string{"https"})
		}},
		{"transport", "connection cut, server without Range", answerOK, payload("/cut-norange", ota.CompressionNone)},
		{"transport", "5 MB message on a desired topic", answerDropped, func(s *suite) string { return s.mqtt("", bytes.Repeat([]byte("A"), 5<<20)) }},
		{"transport", "garbage on a group topic", string(ota.CodeBadEnvelope), func(s *suite) string { return s.mqtt("ota/groups/g/desired", []byte("}garbage{")) }},
		{"local", "lock file planted as a symlink", answerRefused, func(s *suite) string {
			dir := s.t.TempDir()
			os.Symlink(filepath.Join(s.t.TempDir(), "victim"), filepath.Join(dir, "lock"))
			return lockAnswer(statelock.Acquire(dir))
		}},
		{"local", "state directory writable by others", answerRefused, func(s *suite) string {
			dir := s.t.TempDir()
			os.Chmod(dir, 0o777)
			return lockAnswer(statelock.Acquire(dir))
		}},
		{"local", "health_command found through $PATH", answerConfig, func(s *suite) string {
			_, err := config.Parse([]byte("compatible = \"x\"\ndevice_id = \"d\"\n[slots]\nA = \"/a\"\nB = \"/b\"\n[commit]\nhealth_command = [\"check\"]\n"), "otad.toml", "")
			if err != nil && strings.Contains(err.Error(), "commit.health_command") {
				return answerConfig
			}
			return fmt.Sprint(err)
		}},
		{"local", "health check hangs, a grandchild holds its output", answerFailedCheck, func(s *suite) string {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := health{argv: []string{"/bin/sh", "-c", "sleep 600 & sleep 600"}}.Check(ctx)
			if err != nil && time.Since(start) < 5*time.Second {
				return answerFailedCheck
			}
			return fmt.Sprintf("%v after %v", err, time.Since(start))
		}},
		{"local", "U-Boot env never saved", answerNeedOperator, func(s *suite) string {
			dir := s.t.TempDir()
			env, fw := filepath.Join(dir, "env"), filepath.Join(dir, "fw_env.config")
			os.WriteFile(env, bytes.Repeat([]byte{0xff}, 0x2000), 0o600)
			os.WriteFile(fw, []byte(env+" 0x0 0x2000\n"), 0o600)
			cmdline := filepath.Join(dir, "cmdline")
			os.WriteFile(cmdline, []byte("root=/dev/x otad.slot=A\n"), 0o600)
			cfg := &config.Config{Path: "otad.toml", Slots: config.Slots{A: "a", B: "b", Cmdline: cmdline},
				Bootloader: config.Bootloader{Type: "uboot", EnvConfig: fw, Attempts: 3}}
			_, r := openBoot(cfg, slog.New(slog.DiscardHandler), true)
			var envErr *BootEnvError
			if r != nil && r.Code == ota.ExitNeedsOperator && r.Key == "bootloader.env_config" && errors.As(r, &envErr) &&
				strings.Contains(envErr.Recovery, "fw_setenv -c "+fw) {
				return answerNeedOperator
			}
			return fmt.Sprintf("no recovery: %v", r)
		}},
	}
}

func pay(m map[string]any) map[string]any { return m["payload"].(map[string]any) }

func expires(d time.Duration) func(map[string]any) {
	return func(m map[string]any) {
		m["issued_at"] = fuzzNow.Add(d - time.Hour).Format(time.RFC3339)
		m["expires_at"] = fuzzNow.Add(d).Format(time.RFC3339)
	}
}

func lockAnswer(l *statelock.Lock, err error) string {
	if err != nil {
		return answerRefused
	}
	l.Release()
	return "taken"
}

func endedIn(s agent.State, env []byte) (agent.Ended, bool) {
	e, err := verify.ParseEnvelope(env)
	if err != nil {
		return agent.Ended{}, false
	}
	sum := sha256.Sum256(e.Manifest)
	for _, x := range s.Ended {
		if x.Key == hex.EncodeToString(sum[:]) {
			return x, true
		}
	}
	return agent.Ended{}, false
}

// suite holds what the attacks share: the real checks of a device, an
// image server (plain and TLS) with hostile variants, and a broker.
type suite struct {
	t        *testing.T // the attack's
	root     *testing.T // the suite's, for what lives across attacks
	rel      *signer.Signer
	other    crypto.Signer
	chk      *checker
	img      []byte
	sum      string
	x        []byte // a valid offer
	srv, tls *httptest.Server
	hits     sync.Map // path → *atomic.Int32

	brokerOnce sync.Once
	broker     *mosquittotest.Broker
}

func newSuite(t *testing.T) *suite {
	rel, err := signer.New()
	if err != nil {
		t.Fatal(err)
	}
	other, err := verify.GenerateKey(verify.KeyEd25519)
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{t: t, root: t, rel: rel, other: other, img: make([]byte, 200_000)}
	rand.NewChaCha8([32]byte{9}).Read(s.img)
	sum := sha256.Sum256(s.img)
	s.sum = hex.EncodeToString(sum[:])
	s.chk = newOfferPath(t, rel).chk
	s.x, err = rel.Sign(signer.Offer{ID: "rel-x", Version: "x", Compatible: "acme", URL: "https://u/x", Size: 4096,
		SHA256: s.sum, Issued: fuzzNow.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.tls = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/to-http" {
			http.Redirect(w, r, s.srv.URL+"/img", http.StatusFound)
			return
		}
		s.serve(w, r)
	}))
	t.Cleanup(func() { s.srv.Close(); s.tls.Close() })
	return s
}

// manifest is a valid manifest for the suite's device, edited.
func (s *suite) manifest(edit func(map[string]any)) []byte {
	m := map[string]any{
		"schema": 1, "id": "rel-1", "version": "1.0", "security_version": 1,
		"compatible": []any{"acme"}, "devices": []any{"gw-1"},
		"issued_at": fuzzNow.Add(-time.Hour).Format(time.RFC3339), "expires_at": fuzzNow.Add(time.Hour).Format(time.RFC3339),
		"payload": map[string]any{"url": "https://u/img", "compression": "none", "size": 4096, "sha256": s.sum},
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

func (s *suite) env(manifest []byte, keys ...crypto.Signer) []byte {
	var sigs []verify.Signature
	for _, k := range keys {
		sig, err := verify.SignManifest(manifest, k)
		if err != nil {
			s.t.Fatal(err)
		}
		sigs = append(sigs, sig)
	}
	env, err := verify.MarshalEnvelope(manifest, sigs...)
	if err != nil {
		s.t.Fatal(err)
	}
	return env
}

func (s *suite) check(raw []byte) string { return s.checkWith(raw, agent.Facts{InactiveSlot: "B"}) }

func (s *suite) checkWith(raw []byte, f agent.Facts) string {
	if _, err := s.chk.Check(raw, f); err != nil {
		return string(ota.CodeOf(err))
	}
	return answerOK
}

// write installs the payload at url into a scratch slot.
func (s *suite) write(url string, comp ota.Compression, client *http.Client, schemes []string) string {
	slot := filepath.Join(s.t.TempDir(), "slot")
	os.WriteFile(slot, make([]byte, 1<<20), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := slots.Write(ctx, slots.Job{Payload: ota.Payload{URL: url, Compression: comp, Size: int64(len(s.img)), SHA256: s.sum}, Target: slots.File(slot),
		HTTPClient: client, Schemes: schemes, Retry: backoff.Policy{Attempts: 2, Base: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		return string(ota.CodeOf(err))
	}
	return answerOK
}

func (s *suite) serve(w http.ResponseWriter, r *http.Request) {
	n, _ := s.hits.LoadOrStore(r.URL.Path, new(atomic.Int32))
	hit := n.(*atomic.Int32).Add(1)
	switch p := r.URL.Path; {
	case p == "/img":
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(s.img))
	case p == "/tampered":
		b := bytes.Clone(s.img)
		b[1000] ^= 1
		w.Write(b)
	case p == "/short":
		w.Write(s.img[:len(s.img)-1])
	case p == "/long":
		w.Write(append(bytes.Clone(s.img), 0))
	case p == "/cut-norange":
		w.Header().Set("Content-Length", strconv.Itoa(len(s.img)))
		if hit == 1 {
			w.Write(s.img[:len(s.img)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		w.Write(s.img)
	case p == "/xz-dict":
		w.Write(xzHeaderWithDict(40))
	case p == "/zstd-window":
		// Frame header: no single segment, window descriptor 2^31.
		w.Write([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 21 << 3, 0x01, 0x00, 0x00})
	case p == "/gzip-forever":
		var one bytes.Buffer
		gzip.NewWriter(&one).Close()
		chunk := bytes.Repeat(one.Bytes(), 4096)
		for sent := 0; sent < 64<<20 && r.Context().Err() == nil; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	case strings.HasPrefix(p, "/loop/"):
		i, _ := strconv.Atoi(strings.TrimPrefix(p, "/loop/"))
		http.Redirect(w, r, "/loop/"+strconv.Itoa(i+1), http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

// xzHeaderWithDict is an xz stream header and a block header whose LZMA2
// filter declares a dictionary of code (40: 4 GiB - 1), then junk.
func xzHeaderWithDict(code byte) []byte {
	b := []byte{0xfd, '7', 'z', 'X', 'Z', 0, 0, 1}
	b = binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b[6:8]))
	hdr := []byte{0x02, 0x00, 0x21, 0x01, code, 0, 0, 0}
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.ChecksumIEEE(hdr))
	return append(append(b, hdr...), bytes.Repeat([]byte{0x55}, 4096)...)
}

// mqtt publishes payload retained on topic (default: the device's desired
// topic; the device is in group "g") and says
// what reached the device: dropped unread, or the checks' verdict.
func (s *suite) mqtt(topic string, payload []byte) string {
	s.brokerOnce.Do(func() { s.broker = mosquittotest.Start(s.root, mosquittotest.Options{}) })
	id := fmt.Sprintf("adv-%d", rand.Int())
	if topic == "" {
		topic = "ota/devices/" + id + "/desired"
	}
	got := make(chan string, 4)
	d, err := mqtt.Dial(mqtt.Config{Broker: s.broker.URL, DeviceID: id, Groups: []string{"g"}, Logger: slog.New(slog.DiscardHandler),
		OnOversized: func(string, int) { got <- answerDropped }},
		func(_ string, p []byte) { got <- s.check(p) })
	if err != nil {
		return err.Error()
	}
	defer d.Close(context.Background())
	if err := mqtt.PublishRetained(context.Background(), mqtt.Config{Broker: s.broker.URL}, topic, payload); err != nil {
		return err.Error()
	}
	select {
	case a := <-got:
		return a
	case <-time.After(20 * time.Second):
		return "nothing arrived"
	}
}

// TestAdversarial runs every attack class against the real checks, writer,
// transport and local guards, and keeps docs/adversarial.md's table equal to
// this list (go test ./device/node -run TestAdversarial -update rewrites it).
func TestAdversarial(t *testing.T) {
	s := newSuite(t)
	list := attacks()
	for i, a := range list {
		t.Run(fmt.Sprintf("%02d %s %s", i+1, a.category, a.class), func(t *testing.T) {
			s.t = t
			if got := a.run(s); got != a.want {
				t.Fatalf("%s: device answered %q, want %q", a.class, got, a.want)
			}
		})
	}
	s.t = t
	checkTable(t, list)
}

const (
	tableStart = "<!-- table generated by TestAdversarial (device/node); do not edit -->\n"
	tableEnd   = "<!-- end of table -->\n"
)

func checkTable(t *testing.T, list []attack) {
	var b strings.Builder
	b.WriteString(tableStart + "\n| # | category | attack | the device answers |\n|---|---|---|---|\n")
	cats := map[string]int{}
	for i, a := range list {
		cats[a.category]++
		fmt.Fprintf(&b, "| %d | %s | %s | `%s` |\n", i+1, a.category, strings.ReplaceAll(a.class, "|", `\|`), a.want)
	}
	b.WriteString("\n" + tableEnd)
	if len(list) < 40 || len(cats) < 6 {
		t.Fatalf("%d attack classes in %d categories; the suite keeps at least 40 in all six", len(list), len(cats))
	}
	path := filepath.Join("..", "..", "docs", "adversarial.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(tableStart)), bytes.Index(doc, []byte(tableEnd))
	if i < 0 || j < i {
		t.Fatalf("%s: no generated table (markers %q … %q)", path, tableStart, tableEnd)
	}
	want := append(append(bytes.Clone(doc[:i]), b.String()...), doc[j+len(tableEnd):]...)
	if bytes.Equal(doc, want) {
		return
	}
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s is out of date with the suite: go test ./device/node -run TestAdversarial -update", path)
}
