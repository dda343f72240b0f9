package node_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/device/statelock"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

func TestGoodUpdateCommitsAfterReboot(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{SecVer: 5})
	in := tb.Start(nil)
	o, err := in.D.Agent.Install(context.Background(), env)
	devicetest.Must(t, err)
	if o.Result != ota.ResultStaged {
		t.Fatalf("outcome %+v", o)
	}
	devicetest.Must(t, in.Wait(t)) // the sim reboot ends the agent
	if b, _ := tb.Sim().Booted(); b != "B" {
		t.Fatalf("after reboot booted %s, want B", b)
	}
	j := tb.Settle("settle", nil)
	if j.LastResult.Result != ota.ResultSuccess || j.Booted != "B" || j.Slots["B"].SHA256 != sum || j.SecurityFloor != 5 {
		t.Fatalf("journal after commit: %+v %+v floor %d", j.LastResult, j.Slots, j.SecurityFloor)
	}
	st, err := tb.Sim().State(context.Background())
	devicetest.Must(t, err)
	if st.Primary() != "B" || st.Slots["B"].AttemptsLeft != 3 {
		t.Fatalf("bootloader after commit: %+v", st)
	}
	// The same offer again (a retained redelivery) keeps its success: nothing written or fetched.
	before := tb.Fetched.Load()
	in = tb.Start(nil)
	o, err = in.D.Agent.Install(context.Background(), env)
	devicetest.Must(t, err)
	in.Stop()
	in.Wait(t)
	if o.Result != ota.ResultSuccess || tb.Fetched.Load() != before {
		t.Fatalf("re-offer: %+v, fetched %d more bytes", o, tb.Fetched.Load()-before)
	}
}

func TestTamperedImageLeavesBootEnvUnchanged(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	env, _ := tb.Offer("evil", 3, devicetest.OfferOpts{Tamper: true})
	// Settle a first run so the env holds what a healthy boot leaves.
	in := tb.Start(nil)
	time.Sleep(50 * time.Millisecond)
	in.Stop()
	in.Wait(t)
	in = tb.Start(nil)
	o, err := in.D.Agent.Install(context.Background(), env)
	devicetest.Must(t, err)
	in.Stop()
	in.Wait(t)
	if o.Result != ota.ResultFailed || o.Code != "hash_mismatch" {
		t.Fatalf("outcome %+v, want failed hash_mismatch", o)
	}
	st, err := tb.Sim().State(context.Background())
	devicetest.Must(t, err)
	// A stays primary with all its attempts; B, half written, can never boot.
	if st.Primary() != "A" || st.Slots["A"].AttemptsLeft != 3 || st.Slots["B"].Bootable || st.Order[0] != "A" {
		t.Fatalf("boot env after a tampered image: %+v", st)
	}
	tb.CheckBootable("tampered")
}

// Every refusal of docs/contract/checks.md: its code, and not one byte fetched or written.
func TestRefusalsFetchAndWriteNothing(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	now := time.Now().UTC()
	good, _ := tb.Offer("good", 4, devicetest.OfferOpts{})
	unsigned := bytes.Replace(good, []byte(`"sig":"`), []byte(`"sig":"AAAA`), 1)
	otherKey, _ := verify.GenerateKey("ecdsa-p256")
	mb := func(m map[string]any) []byte { b, _ := json.Marshal(m); return b }
	signed := func(m []byte) []byte {
		s, _ := verify.SignManifest(m, tb.Key)
		e, _ := verify.MarshalEnvelope(m, s)
		return e
	}
	foreign := func() []byte {
		env, _ := verify.ParseEnvelope(good)
		s, _ := verify.SignManifest(env.Manifest, otherKey)
		e, _ := verify.MarshalEnvelope(env.Manifest, s)
		return e
	}()
	goodEnv, _ := verify.ParseEnvelope(good)
	goodSum := sha256.Sum256(goodEnv.Manifest)
	noSigs, _ := json.Marshal(map[string]any{"manifest": goodEnv.Manifest, "signatures": []any{}})
	schema2 := mb(map[string]any{"schema": 2})
	schema2Sum := sha256.Sum256(schema2)
	// manifest is the digest last_refusal names the offer by: whenever the
	// manifest bytes could be decoded, authentic or not (docs/contract/installing.md).
	cases := []struct {
		code     ota.Code
		raw      []byte
		manifest []byte
	}{
		{"too_large", bytes.Repeat([]byte(" "), 256<<10+1), nil},
		{"bad_envelope", []byte(`{"manifest": 12}`), nil},
		{"bad_envelope", noSigs, goodSum[:]},
		{"bad_signature", unsigned, goodSum[:]},
		{"bad_signature", foreign, goodSum[:]},
		{"bad_manifest", signed(schema2), schema2Sum[:]},
		{"incompatible", func() []byte { e, _ := tb.Offer("x1", 5, devicetest.OfferOpts{Compat: "acme,other"}); return e }(), nil},
		{"not_for_this_device", func() []byte { e, _ := tb.Offer("x2", 5, devicetest.OfferOpts{Device: "gw-9999"}); return e }(), nil},
		{"expired", func() []byte {
			e, _ := tb.Offer("x3", 5, devicetest.OfferOpts{Issued: now.Add(-48 * time.Hour), Expires: time.Hour})
			return e
		}(), nil},
		{"too_big_for_slot", func() []byte {
			e, _ := tb.Offer("x4", 5, devicetest.OfferOpts{Size: devicetest.SlotSize + 1})
			return e
		}(), nil},
		{"url_not_allowed", func() []byte { e, _ := tb.Offer("x5", 5, devicetest.OfferOpts{URL: "ftp://example.com/img"}); return e }(), nil},
	}
	in := tb.Start(nil)
	defer func() { in.Stop(); in.Wait(t) }()
	slotB, _ := os.ReadFile(tb.Cfg.Slots.B)
	for _, c := range cases {
		o, err := in.D.Agent.Install(context.Background(), c.raw)
		devicetest.Must(t, err)
		if o.Result != ota.ResultRejected || o.Code != c.code {
			t.Errorf("want rejected %s, got %+v", c.code, o)
		}
		st := in.D.Agent.Status()
		if st.LastResult != nil || st.LastRefusal == nil || st.LastRefusal.Code != c.code {
			t.Fatalf("status does not show %s in last_refusal only: %+v %+v", c.code, st.LastResult, st.LastRefusal)
		}
		if env, err := verify.ParseEnvelope(c.raw); err == nil && c.code.Authentic() {
			sum := sha256.Sum256(env.Manifest)
			c.manifest = sum[:]
		}
		if c.manifest != nil && st.LastRefusal.ManifestSHA256 != hex.EncodeToString(c.manifest) {
			t.Errorf("%s: last_refusal manifest_sha256 %q, want %x", c.code, st.LastRefusal.ManifestSHA256, c.manifest)
		}
		if r := st.LastRefusal; !c.code.Authentic() && (r.ID != "" || r.SHA256 != "") {
			t.Errorf("%s: last_refusal trusts the unauthenticated manifest: id %q sha256 %q", c.code, r.ID, r.SHA256)
		}
	}
	if n := tb.Fetched.Load(); n != 0 {
		t.Errorf("%d bytes fetched for refused offers", n)
	}
	if now, _ := os.ReadFile(tb.Cfg.Slots.B); !bytes.Equal(now, slotB) {
		t.Error("slot B was written for a refused offer")
	}
	// downgrade and stale need history: commit a security_version 5 image first
	// (done elsewhere); here, check them against the journal's floor directly.
	j := tb.Journal()
	j.SecurityFloor, j.NewestIssuedAt = 9, now
	in.Stop()
	in.Wait(t)
	devicetest.Must(t, agent.Journal{Dir: tb.Cfg.StateDir}.Save(j))
	in = tb.Start(nil)
	for _, c := range []struct {
		code ota.Code
		o    devicetest.OfferOpts
	}{
		{"downgrade", devicetest.OfferOpts{SecVer: 3, Issued: now.Add(time.Minute)}},
		{"stale", devicetest.OfferOpts{SecVer: 9, Issued: now.Add(-time.Hour)}},
	} {
		e, _ := tb.Offer("h-"+string(c.code), 6, c.o)
		o, err := in.D.Agent.Install(context.Background(), e)
		devicetest.Must(t, err)
		if o.Code != c.code {
			t.Errorf("want %s, got %+v", c.code, o)
		}
	}
	if n := tb.Fetched.Load(); n != 0 {
		t.Errorf("%d bytes fetched for refused offers", n)
	}
}

// 100 offers at once against real parts: one writer at a time (the slot is
// opened exclusively: a second writer would fail with write_failed), and the
// device ends on the newest offer.
func TestHundredConcurrentOffers(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	base := time.Now().UTC().Add(-time.Hour)
	var envs [][]byte
	newestSum := ""
	for i := range 6 {
		e, s := tb.Offer(fmt.Sprintf("c%d", i), uint64(10+i), devicetest.OfferOpts{Issued: base.Add(time.Duration(i) * time.Minute)})
		envs = append(envs, e)
		newestSum = s
	}
	bad := bytes.Replace(envs[0], []byte(`"sig":"`), []byte(`"sig":"AAAA`), 1)
	in := tb.Start(nil)
	defer func() { in.Stop(); in.Wait(t) }()
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
			o, err := in.D.Agent.Install(context.Background(), raw)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			results[string(o.Result)+"/"+string(o.Code)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if results["failed/write_failed"] > 0 {
		t.Errorf("two writers collided: %v", results)
	}
	st := in.D.Agent.Status()
	// The newest is installed, or waits pending if an older one got past the
	// flip before it arrived (from staged on nothing preempts).
	onNewest := st.Target != nil && st.Target.SHA256 == newestSum && st.Pending == nil
	waitsNewest := st.Pending != nil && st.Pending.SHA256 == newestSum
	if st.State != ota.Staged || !(onNewest || waitsNewest) { // manual policy: staged (issue 27)
		t.Fatalf("ended %s on %+v pending %+v, want the newest; outcomes %v", st.State, st.Target, st.Pending, results)
	}
	if got := devicetest.FileSHA(t, tb.Cfg.Slots.B, devicetest.ImageSize); got != st.Target.SHA256 {
		t.Fatalf("slot B holds %s, the target is %s", got[:12], st.Target.SHA256[:12])
	}
	t.Logf("outcomes: %v", results)
}

// crasher wraps the parts that change something durable — the journal, the
// boot environment, the reboot — and ends the agent's goroutine right before
// the k-th such change, as a crash ends the process.
type crasher struct {
	k  int
	mu sync.Mutex
	n  int
	at string // the change it crashed before
}

func (c *crasher) step(op string) {
	c.mu.Lock()
	crash := c.at == "" && c.n == c.k
	if crash {
		c.at = op
	}
	c.n++
	c.mu.Unlock()
	if crash {
		runtime.Goexit()
	}
}

func (c *crasher) crashed() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, c.at != ""
}

func (c *crasher) wrap(p *node.Parts) {
	p.Deps.Store = crashStore{p.Deps.Store, c}
	p.Deps.Bootloader = crashBoot{p.Deps.Bootloader, c}
	p.Deps.Rebooter = crashReboot{p.Deps.Rebooter, c}
}

type crashStore struct {
	agent.Store
	c *crasher
}

func (s crashStore) Save(st agent.State) error {
	s.c.step("journal " + string(st.Phase))
	return s.Store.Save(st)
}

type crashBoot struct {
	agent.Bootloader
	c *crasher
}

func (b crashBoot) MarkBad(ctx context.Context, s ota.Slot) error {
	b.c.step("mark bad " + string(s))
	return b.Bootloader.MarkBad(ctx, s)
}

func (b crashBoot) MarkActive(ctx context.Context, s ota.Slot) error {
	b.c.step("mark active " + string(s))
	return b.Bootloader.MarkActive(ctx, s)
}

func (b crashBoot) MarkGood(ctx context.Context, s ota.Slot) error {
	b.c.step("mark good " + string(s))
	return b.Bootloader.MarkGood(ctx, s)
}

type crashReboot struct {
	agent.Rebooter
	c *crasher
}

func (r crashReboot) Reboot(ctx context.Context) error {
	r.c.step("reboot")
	return r.Rebooter.Reboot(ctx)
}

// A crash before every durable change of the whole update — install, flip,
// reboot, confirm, commit — each followed either by a plain restart or by a
// power cut: the device always boots a slot whose contents the journal
// vouches for, and the update always completes.
func TestCrashAtEveryStep(t *testing.T) {
	for _, powerCut := range []bool{false, true} {
		for k := 0; ; k++ {
			tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
			env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{})
			c := &crasher{k: k}
			label := func() string {
				at, _ := c.crashed()
				return fmt.Sprintf("crash before change %d (%s), power cut %v", k, at, powerCut)
			}
			settled := false
			for run := 0; run < 12 && !settled; run++ {
				in := tb.Start(c.wrap)
				// Like a retained MQTT offer, delivered again on every start.
				go in.D.Agent.Install(context.Background(), env)
				deadline := time.Now().Add(30 * time.Second)
			wait:
				for {
					select {
					case err := <-in.Done():
						if errors.Is(err, devicetest.ErrEnded) && powerCut {
							tb.CheckBootable(label())
						} else if err != nil && !errors.Is(err, devicetest.ErrEnded) {
							t.Fatalf("%s: run ended with %v", label(), err)
						}
						break wait // crashed, or the sim device rebooted
					case <-time.After(10 * time.Millisecond):
						st := in.D.Agent.Status()
						if st.State == ota.Idle && st.LastResult != nil && st.LastResult.SHA256 == sum {
							in.Stop()
							in.Wait(t)
							settled = true
							break wait
						}
						if time.Now().After(deadline) {
							t.Fatalf("%s: stuck: %+v", label(), st)
						}
					}
				}
			}
			if !settled {
				t.Fatalf("%s: did not settle", label())
			}
			if _, crashed := c.crashed(); !crashed {
				if k < 12 {
					t.Fatalf("only %d durable changes in a whole update", k)
				}
				t.Logf("power cut %v: crashed before each of %d durable changes", powerCut, k)
				break
			}
			tb.CheckBootable(label() + ", after settling")
			j := tb.Journal()
			if r := j.LastResult; r.Result != ota.ResultSuccess || j.Booted != "B" ||
				devicetest.FileSHA(t, tb.Cfg.Slots.B, devicetest.ImageSize) != sum {
				t.Fatalf("%s: ended %+v booted %s", label(), r, j.Booted)
			}
		}
	}
}

// Power cut in the middle of writing the slot: the old slot boots, and the
// install starts again and completes.
func TestPowerCutMidWrite(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{})
	tb.Throttle.Store(true)
	in := tb.Start(nil)
	go in.D.Agent.Install(context.Background(), env)
	for in.D.Agent.Status().Target == nil || in.D.Agent.Status().Target.BytesDone == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	in.Stop() // the process dies mid-write
	in.Wait(t)
	tb.CheckBootable("mid-write")
	if j := tb.Journal(); j.Phase != ota.Downloading && j.Phase != ota.Verifying {
		t.Fatalf("journal after cut: %s", j.Phase)
	}
	tb.Throttle.Store(false)
	j := tb.Settle("settle", nil)
	if j.LastResult.Result != ota.ResultSuccess || j.Slots["B"].SHA256 != sum {
		t.Fatalf("after resume: %+v", j.LastResult)
	}
}

// While one process holds the state lock, a second cannot open the device.
func TestSecondProcessIsBusy(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	in := tb.Start(nil)
	defer func() { in.Stop(); in.Wait(t) }()
	if _, err := statelock.Acquire(tb.Cfg.StateDir); !errors.Is(err, statelock.ErrBusy) {
		t.Fatalf("second lock: %v", err)
	}
}

// A new slot that never comes up (its agent never runs): the sim bootloader
// counts its attempts down and falls back; the agent on the old slot
// reports rolled_back and never marks the new slot good.
func TestSlotThatNeverBootsIsAbandoned(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	sum := stageAndReboot(t, tb)
	s := tb.Sim()
	booted, _ := s.Booted()
	var err error
	for i := 0; booted == "B"; i++ {
		if i > tb.Cfg.Bootloader.Attempts {
			t.Fatal("the bootloader never gave up on B")
		}
		booted, err = s.Boot() // B hangs before otad starts: the watchdog resets
		devicetest.Must(t, err)
	}
	j := tb.Settle("fallback", nil)
	if j.Booted != "A" || j.LastResult.Result != ota.ResultRolledBack || j.LastResult.Code != ota.CodeRolledBackByBootloader ||
		j.LastResult.SHA256 != sum || j.Slots["B"].Status != ota.SlotBad {
		t.Fatalf("after fallback: booted %s result %+v slot B %+v", j.Booted, j.LastResult, j.Slots["B"])
	}
	st, err := s.State(context.Background())
	devicetest.Must(t, err)
	if st.Primary() != "A" || st.Slots["B"].Bootable {
		t.Fatalf("bootloader after fallback: %+v", st)
	}
}

// A failing health check on the new slot: marked bad, back to the old slot,
// result failed/health_check_failed.
func TestHealthCheckFailureRollsBack(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate", Window: "1s",
		Health: []string{"/bin/sh", "-c", "echo disk full >&2; exit 1"}})
	sum := stageAndReboot(t, tb)
	in := tb.Start(nil)
	if err := in.Wait(t); err != nil { // the check fails: rebooted into A
		t.Fatal(err)
	}
	j := tb.Settle("health", nil)
	if j.Booted != "A" || j.LastResult.Result != ota.ResultFailed || j.LastResult.Code != ota.CodeHealthCheckFailed ||
		j.LastResult.SHA256 != sum || !strings.Contains(j.LastResult.Message, "disk full") {
		t.Fatalf("after a failed health check: booted %s result %+v", j.Booted, j.LastResult)
	}
	if b, _ := tb.Sim().Booted(); b != "A" {
		t.Fatalf("sim booted %s", b)
	}
}

// A slot device that does not open is named at start (key and path), and
// the device still starts: its booted slot has to be committed after a boot.
func TestUnusableSlotDeviceWarnsAtStart(t *testing.T) {
	for _, c := range []struct {
		name string
		dev  func(dir string) string
	}{
		{"missing", func(dir string) string { return filepath.Join(dir, "no-such-device") }},
		{"directory", func(dir string) string { return dir }},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
			dev := c.dev(t.TempDir())
			tb.Cfg.Slots.B = dev
			var logs bytes.Buffer
			p, err := node.Build(tb.Cfg, node.Options{AgentVersion: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("start refused for an unusable slot B: %v", err)
			}
			if _, err := node.Assemble(tb.Cfg, p, node.Options{AgentVersion: "test", Logger: slog.New(slog.DiscardHandler)}); err != nil {
				t.Fatalf("assembly refused for an unusable slot B: %v", err)
			}
			out := logs.String()
			if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "key=slots.B") || !strings.Contains(out, "path="+dev) {
				t.Errorf("no warning naming slots.B and %s:\n%s", dev, out)
			}
			if strings.Contains(out, "key=slots.A") {
				t.Errorf("slot A, which exists, is warned about:\n%s", out)
			}
		})
	}
}
