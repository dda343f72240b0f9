package device

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/internal/config"
	"github.com/otad/otad/internal/statelock"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/verify"
)

const slotSize = 4 << 20

// testbed is a file-backed device: two slot files, a sim bootloader, a state
// directory, a trust directory, and an HTTP server for images.
type testbed struct {
	t        *testing.T
	dir      string
	cfg      *config.Config
	key      crypto.Signer
	srv      *httptest.Server
	images   map[string][]byte
	mu       sync.Mutex
	fetched  atomic.Int64 // payload bytes served
	throttle atomic.Bool  // serve slowly, so a test can interrupt mid-write
	factory  []byte       // what slot A holds at first
}

func newTestbed(t *testing.T, policy string) *testbed {
	t.Helper()
	dir := t.TempDir()
	tb := &testbed{t: t, dir: dir, images: map[string][]byte{}}
	tb.factory = randBytes(1, slotSize)
	must(t, os.WriteFile(filepath.Join(dir, "slotA"), tb.factory, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "slotB"), make([]byte, slotSize), 0o600))
	must(t, os.MkdirAll(filepath.Join(dir, "keys"), 0o700))
	key, err := verify.GenerateKey("ecdsa-p256")
	must(t, err)
	tb.key = key
	pub, err := verify.MarshalPublicKeyPEM(key.Public())
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "keys", "release.pub"), pub, 0o644))
	tb.srv = httptest.NewServer(http.HandlerFunc(tb.serve))
	t.Cleanup(tb.srv.Close)
	toml := fmt.Sprintf(`
device_id = "gw-0001"
compatible = "acme,gw-v2"
state_dir = %q
control_socket = %q
[trust]
keys_dir = %q
[slots]
A = %q
B = %q
[bootloader]
type = "sim"
env_file = %q
attempts = 3
[download]
schemes = ["http"]
retries = 2
backoff = "10ms"
max_backoff = "50ms"
[commit]
window = "10s"
[reboot]
policy = %q
`, filepath.Join(dir, "state"), filepath.Join(dir, "otad.sock"), filepath.Join(dir, "keys"),
		filepath.Join(dir, "slotA"), filepath.Join(dir, "slotB"), filepath.Join(dir, "bootenv"), policy)
	cfg, err := config.Parse([]byte(toml), filepath.Join(dir, "otad.toml"), "")
	must(t, err)
	tb.cfg = cfg
	return tb
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	return b
}

func (tb *testbed) serve(w http.ResponseWriter, r *http.Request) {
	tb.mu.Lock()
	img, ok := tb.images[strings.TrimPrefix(r.URL.Path, "/")]
	tb.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if !tb.throttle.Load() {
		tb.fetched.Add(int64(len(img)))
		http.ServeContent(w, r, "img", time.Time{}, bytes.NewReader(img))
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(img)))
	for off := 0; off < len(img); off += 64 << 10 {
		n, err := w.Write(img[off:min(off+64<<10, len(img))])
		tb.fetched.Add(int64(n))
		if err != nil {
			return
		}
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
	}
}

type offerOpts struct {
	issued  time.Time
	secver  uint64
	tamper  bool // serve other bytes than the manifest describes
	compat  string
	device  string
	expires time.Duration
	size    int64 // manifest size override
	url     string
}

// offer publishes an image on the server and returns a signed envelope for it.
func (tb *testbed) offer(name string, seed uint64, o offerOpts) ([]byte, string) {
	tb.t.Helper()
	img := randBytes(seed, 3<<20+12345)
	sum := sha256.Sum256(img)
	served := img
	if o.tamper {
		served = bytes.Clone(img)
		served[len(served)/2] ^= 0xff
	}
	tb.mu.Lock()
	tb.images[name] = served
	tb.mu.Unlock()
	if o.issued.IsZero() {
		o.issued = time.Now().UTC().Add(-time.Minute)
	}
	if o.compat == "" {
		o.compat = "acme,gw-v2"
	}
	if o.expires == 0 {
		o.expires = 24 * time.Hour
	}
	if o.size == 0 {
		o.size = int64(len(img))
	}
	if o.url == "" {
		o.url = tb.srv.URL + "/" + name
	}
	m := verify.Manifest{
		Schema: 1, ID: "rel-" + name, Version: name, SecurityVersion: o.secver, Compatible: []string{o.compat},
		IssuedAt: o.issued, ExpiresAt: o.issued.Add(o.expires),
		Payload: verify.Payload{URL: o.url, Compression: "none", Size: o.size, SHA256: hex.EncodeToString(sum[:])},
	}
	if o.device != "" {
		m.Devices = []string{o.device}
	}
	mb, err := json.Marshal(m)
	must(tb.t, err)
	sig, err := verify.SignManifest(mb, tb.key)
	must(tb.t, err)
	env, err := verify.MarshalEnvelope(mb, sig)
	must(tb.t, err)
	return env, hex.EncodeToString(sum[:])
}

// instance is one run of the agent process on the testbed.
type instance struct {
	d    *Device
	lock *statelock.Lock
	done chan error
	stop context.CancelFunc
}

func (tb *testbed) start(interrupt func(agent.Effect) error) *instance {
	tb.t.Helper()
	lock, err := statelock.Acquire(tb.cfg.StateDir)
	must(tb.t, err)
	d, err := Open(tb.cfg, Options{AgentVersion: "test", Logger: slog.New(slog.DiscardHandler), Interrupt: interrupt,
		Retry: &slots.Retry{Attempts: 2, Base: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		lock.Release()
		tb.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{d: d, lock: lock, done: make(chan error, 1), stop: cancel}
	go func() {
		err := d.Run(ctx)
		lock.Release()
		in.done <- err
	}()
	return in
}

func (in *instance) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-in.done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("agent did not stop")
		return nil
	}
}

func (tb *testbed) sim() *sim.Sim {
	s, err := sim.Open(tb.cfg.Bootloader.EnvFile, tb.cfg.Bootloader.Attempts)
	must(tb.t, err)
	return s
}

func (tb *testbed) journal() agent.State {
	s, _, err := agent.Journal{Dir: tb.cfg.StateDir}.Load()
	must(tb.t, err)
	return s
}

func fileSHA(t *testing.T, path string, n int64) string {
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.CopyN(h, f, n)
	must(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// settle runs agents (restarting them after each simulated reboot) until the
// device is idle with an outcome, and returns the journal.
// Like a retained MQTT offer, env is delivered again on every start.
func (tb *testbed) settle(label string, env []byte) agent.State {
	tb.t.Helper()
	for range 10 {
		in := tb.start(nil)
		if env != nil {
			go in.d.Agent.Install(context.Background(), env)
		}
		deadline := time.Now().Add(60 * time.Second)
		stopped := false
		for !stopped && time.Now().Before(deadline) {
			select {
			case err := <-in.done:
				must(tb.t, err)
				stopped = true // the sim device rebooted
			case <-time.After(20 * time.Millisecond):
				if st := in.d.Agent.Status(); st.State == agent.Idle && st.LastResult != nil {
					in.stop()
					must(tb.t, in.wait(tb.t))
					return tb.journal()
				}
			}
		}
		if !stopped {
			tb.t.Fatalf("%s: device did not settle: %+v", label, in.d.Agent.Status())
		}
	}
	tb.t.Fatalf("%s: device kept rebooting", label)
	return agent.State{}
}

// checkBootable powers the sim device on and checks that the slot it picks
// holds what the journal says it holds.
func (tb *testbed) checkBootable(label string) {
	tb.t.Helper()
	s := tb.sim()
	slot, err := s.Boot()
	must(tb.t, err)
	j := tb.journal()
	path := tb.cfg.Slots.Devices()[slot]
	info := j.Slots[slot]
	switch {
	case slot == "A" && info.SHA256 == "":
		if got, want := fileSHA(tb.t, path, slotSize), hex.EncodeToString(sha(tb.factory)); got != want {
			tb.t.Fatalf("%s: booted A, and A no longer holds the factory image", label)
		}
	case info.SHA256 == "" || (info.Status != agent.SlotGood && info.Status != agent.SlotStaged):
		tb.t.Fatalf("%s: booted slot %s, which the journal does not vouch for (%+v)", label, slot, info)
	default:
		if got := fileSHA(tb.t, path, 3<<20+12345); got != info.SHA256 {
			tb.t.Fatalf("%s: booted slot %s holds %s, journal says %s", label, slot, got[:12], info.SHA256[:12])
		}
	}
}

func sha(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func TestGoodUpdateCommitsAfterReboot(t *testing.T) {
	tb := newTestbed(t, "immediate")
	env, sum := tb.offer("v2", 2, offerOpts{secver: 5})
	in := tb.start(nil)
	o, err := in.d.Agent.Install(context.Background(), env)
	must(t, err)
	if o.Result != agent.ResultStaged {
		t.Fatalf("outcome %+v", o)
	}
	must(t, in.wait(t)) // the sim reboot ends the agent
	if b, _ := tb.sim().Booted(); b != "B" {
		t.Fatalf("after reboot booted %s, want B", b)
	}
	j := tb.settle("settle", nil)
	if j.LastResult.Result != agent.ResultSuccess || j.Booted != "B" || j.Slots["B"].SHA256 != sum || j.SecurityFloor != 5 {
		t.Fatalf("journal after commit: %+v %+v floor %d", j.LastResult, j.Slots, j.SecurityFloor)
	}
	st, err := tb.sim().State(context.Background())
	must(t, err)
	if st.Primary() != "B" || st.Slots["B"].AttemptsLeft != 3 {
		t.Fatalf("bootloader after commit: %+v", st)
	}
	// The same offer again (a retained redelivery) keeps its success: nothing written or fetched.
	before := tb.fetched.Load()
	in = tb.start(nil)
	o, err = in.d.Agent.Install(context.Background(), env)
	must(t, err)
	in.stop()
	in.wait(t)
	if o.Result != agent.ResultSuccess || tb.fetched.Load() != before {
		t.Fatalf("re-offer: %+v, fetched %d more bytes", o, tb.fetched.Load()-before)
	}
}

func TestTamperedImageLeavesBootEnvUnchanged(t *testing.T) {
	tb := newTestbed(t, "immediate")
	env, _ := tb.offer("evil", 3, offerOpts{tamper: true})
	// Settle a first run so the env holds what a healthy boot leaves.
	in := tb.start(nil)
	time.Sleep(50 * time.Millisecond)
	in.stop()
	in.wait(t)
	in = tb.start(nil)
	o, err := in.d.Agent.Install(context.Background(), env)
	must(t, err)
	in.stop()
	in.wait(t)
	if o.Result != agent.ResultFailed || o.Code != "hash_mismatch" {
		t.Fatalf("outcome %+v, want failed hash_mismatch", o)
	}
	st, err := tb.sim().State(context.Background())
	must(t, err)
	// A stays primary with all its attempts; B, half written, can never boot.
	if st.Primary() != "A" || st.Slots["A"].AttemptsLeft != 3 || st.Slots["B"].Bootable || st.Order[0] != "A" {
		t.Fatalf("boot env after a tampered image: %+v", st)
	}
	tb.checkBootable("tampered")
}

// Every §5 refusal: its code, and not one byte fetched or written.
func TestRefusalsFetchAndWriteNothing(t *testing.T) {
	tb := newTestbed(t, "immediate")
	now := time.Now().UTC()
	good, _ := tb.offer("good", 4, offerOpts{})
	unsigned := bytes.Replace(good, []byte(`"sig":"`), []byte(`"sig":"AAAA`), 1)
	otherKey, _ := verify.GenerateKey("ecdsa-p256")
	mb := func(m map[string]any) []byte { b, _ := json.Marshal(m); return b }
	signed := func(m []byte) []byte {
		s, _ := verify.SignManifest(m, tb.key)
		e, _ := verify.MarshalEnvelope(m, s)
		return e
	}
	foreign := func() []byte {
		env, _ := verify.ParseEnvelope(good)
		s, _ := verify.SignManifest(env.Manifest, otherKey)
		e, _ := verify.MarshalEnvelope(env.Manifest, s)
		return e
	}()
	cases := []struct {
		code string
		raw  []byte
	}{
		{"too_large", bytes.Repeat([]byte(" "), 256<<10+1)},
		{"bad_envelope", []byte(`{"manifest": 12}`)},
		{"bad_signature", unsigned},
		{"bad_signature", foreign},
		{"bad_manifest", signed(mb(map[string]any{"schema": 2}))},
		{"incompatible", func() []byte { e, _ := tb.offer("x1", 5, offerOpts{compat: "acme,other"}); return e }()},
		{"not_for_this_device", func() []byte { e, _ := tb.offer("x2", 5, offerOpts{device: "gw-9999"}); return e }()},
		{"expired", func() []byte {
			e, _ := tb.offer("x3", 5, offerOpts{issued: now.Add(-48 * time.Hour), expires: time.Hour})
			return e
		}()},
		{"too_big_for_slot", func() []byte { e, _ := tb.offer("x4", 5, offerOpts{size: slotSize + 1}); return e }()},
		{"url_not_allowed", func() []byte { e, _ := tb.offer("x5", 5, offerOpts{url: "ftp://example.com/img"}); return e }()},
	}
	in := tb.start(nil)
	defer func() { in.stop(); in.wait(t) }()
	slotB, _ := os.ReadFile(tb.cfg.Slots.B)
	for _, c := range cases {
		o, err := in.d.Agent.Install(context.Background(), c.raw)
		must(t, err)
		if o.Result != agent.ResultRejected || o.Code != c.code {
			t.Errorf("want rejected %s, got %+v", c.code, o)
		}
		if st := in.d.Agent.Status(); st.LastResult == nil || st.LastResult.Code != c.code {
			t.Errorf("status does not show %s: %+v", c.code, st.LastResult)
		}
	}
	if n := tb.fetched.Load(); n != 0 {
		t.Errorf("%d bytes fetched for refused offers", n)
	}
	if now, _ := os.ReadFile(tb.cfg.Slots.B); !bytes.Equal(now, slotB) {
		t.Error("slot B was written for a refused offer")
	}
	// downgrade and stale need history: commit a security_version 5 image first
	// (done elsewhere); here, check them against the journal's floor directly.
	j := tb.journal()
	j.SecurityFloor, j.NewestIssuedAt = 9, now
	in.stop()
	in.wait(t)
	must(t, agent.Journal{Dir: tb.cfg.StateDir}.Save(j))
	in = tb.start(nil)
	for _, c := range []struct {
		code string
		o    offerOpts
	}{
		{"downgrade", offerOpts{secver: 3, issued: now.Add(time.Minute)}},
		{"stale", offerOpts{secver: 9, issued: now.Add(-time.Hour)}},
	} {
		e, _ := tb.offer("h-"+c.code, 6, c.o)
		o, err := in.d.Agent.Install(context.Background(), e)
		must(t, err)
		if o.Code != c.code {
			t.Errorf("want %s, got %+v", c.code, o)
		}
	}
	if n := tb.fetched.Load(); n != 0 {
		t.Errorf("%d bytes fetched for refused offers", n)
	}
}

// 100 offers at once against real parts: one writer at a time (the slot is
// opened exclusively: a second writer would fail with write_failed), and the
// device ends on the newest offer.
func TestHundredConcurrentOffers(t *testing.T) {
	tb := newTestbed(t, "manual")
	base := time.Now().UTC().Add(-time.Hour)
	var envs [][]byte
	newestSum := ""
	for i := range 6 {
		e, s := tb.offer(fmt.Sprintf("c%d", i), uint64(10+i), offerOpts{issued: base.Add(time.Duration(i) * time.Minute)})
		envs = append(envs, e)
		newestSum = s
	}
	bad := bytes.Replace(envs[0], []byte(`"sig":"`), []byte(`"sig":"AAAA`), 1)
	in := tb.start(nil)
	defer func() { in.stop(); in.wait(t) }()
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[string]int{}
	for i := range 100 {
		raw := envs[rand.IntN(len(envs))]
		switch {
		case i == 50:
			raw = envs[len(envs)-1]
		case i%7 == 0:
			raw = bad
		}
		wg.Go(func() {
			o, err := in.d.Agent.Install(context.Background(), raw)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			results[o.Result+"/"+o.Code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if results["failed/write_failed"] > 0 {
		t.Errorf("two writers collided: %v", results)
	}
	st := in.d.Agent.Status()
	if st.State != agent.Rebooting || st.Target == nil || st.Target.SHA256 != newestSum {
		t.Fatalf("ended %s on %+v, want rebooting on the newest; outcomes %v", st.State, st.Target, results)
	}
	if got := fileSHA(t, tb.cfg.Slots.B, 3<<20+12345); got != newestSum {
		t.Fatalf("slot B holds %s, want the newest %s", got[:12], newestSum[:12])
	}
	t.Logf("outcomes: %v", results)
}

var errCrash = errors.New("simulated crash")

// A crash at every effect of the install sequence, each followed either by
// a plain restart or by a power cut: the device always boots a slot whose
// contents the journal vouches for, and the agent ends knowing what happened.
func TestCrashAtEveryStep(t *testing.T) {
	for _, powerCut := range []bool{false, true} {
		for k := 0; ; k++ {
			tb := newTestbed(t, "immediate")
			env, sum := tb.offer("v2", 2, offerOpts{})
			n := 0
			crashed := false
			var at agent.Effect
			in := tb.start(func(e agent.Effect) error {
				if n == k {
					crashed, at = true, e
					return errCrash
				}
				n++
				return nil
			})
			in.d.Agent.Install(context.Background(), env)
			err := in.wait(t)
			if !crashed {
				if k < 8 {
					t.Fatalf("only %d effects in a whole install", k)
				}
				break
			}
			if !errors.Is(err, errCrash) {
				t.Fatalf("k=%d: run ended with %v", k, err)
			}
			label := fmt.Sprintf("crash before effect %d (%T), power cut %v", k, at, powerCut)
			if powerCut {
				tb.checkBootable(label)
			}
			j := tb.settle(label, env)
			tb.checkBootable(label + ", after settling")
			r := j.LastResult
			if r == nil || r.SHA256 != sum {
				t.Fatalf("%s: the agent does not know what happened: %+v", label, r)
			}
			switch r.Result {
			case agent.ResultSuccess:
				if j.Booted != "B" || fileSHA(t, tb.cfg.Slots.B, 3<<20+12345) != sum {
					t.Fatalf("%s: success but not running the image", label)
				}
			case agent.ResultRolledBack:
				// Allowed only when power was cut between staging and the reboot.
				if !powerCut {
					t.Fatalf("%s: rolled back without a power cut: %+v", label, r)
				}
			default:
				t.Fatalf("%s: ended %+v", label, r)
			}
		}
	}
}

// Power cut in the middle of writing the slot: the old slot boots, and the
// install starts again and completes.
func TestPowerCutMidWrite(t *testing.T) {
	tb := newTestbed(t, "immediate")
	env, sum := tb.offer("v2", 2, offerOpts{})
	tb.throttle.Store(true)
	in := tb.start(nil)
	go in.d.Agent.Install(context.Background(), env)
	for in.d.Agent.Status().Target == nil || in.d.Agent.Status().Target.BytesDone == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	in.stop() // the process dies mid-write
	in.wait(t)
	tb.checkBootable("mid-write")
	if j := tb.journal(); j.Phase != agent.Downloading && j.Phase != agent.Verifying {
		t.Fatalf("journal after cut: %s", j.Phase)
	}
	tb.throttle.Store(false)
	j := tb.settle("settle", nil)
	if j.LastResult.Result != agent.ResultSuccess || j.Slots["B"].SHA256 != sum {
		t.Fatalf("after resume: %+v", j.LastResult)
	}
}

// While one process holds the state lock, a second cannot open the device.
func TestSecondProcessIsBusy(t *testing.T) {
	tb := newTestbed(t, "immediate")
	in := tb.start(nil)
	defer func() { in.stop(); in.wait(t) }()
	if _, err := statelock.Acquire(tb.cfg.StateDir); !errors.Is(err, statelock.ErrBusy) {
		t.Fatalf("second lock: %v", err)
	}
}

var _ bootctl.Bootloader = (*sim.Sim)(nil)
