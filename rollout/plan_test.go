package rollout

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

const specPlan = "../testdata/rollouts/spec.plan.toml"

func TestLoadPlanSpecExample(t *testing.T) {
	p, err := LoadPlan(specPlan)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "fw-4_2_0-eu" || p.Group != "eu-prod" || len(p.Waves) != 3 {
		t.Fatalf("plan %+v", p)
	}
	if !slices.Equal(p.Waves[0].Devices, []string{"gw-0001", "gw-0002"}) || p.Waves[0].Soak != 30*time.Minute ||
		p.Waves[1].Percent != 10 || p.Waves[1].Soak != 2*time.Hour || p.Waves[2].Percent != 100 || p.Waves[2].Soak != 0 {
		t.Errorf("waves %+v", p.Waves)
	}
	if p.Halt != (HaltRule{MaxFailedPercent: 5, MinOutcomes: 10, DeviceTimeout: 2 * time.Hour}) {
		t.Errorf("halt %+v", p.Halt)
	}
	if p.Offer.ID != "rel-test-1" || p.Offer.SHA256 != "08db13889ba47ba06a44867b816d3f0471e2357f0cead49871d525829dc594f5" || p.Offer.Version != "4.2.0" {
		t.Errorf("offer %+v", p.Offer)
	}
	if len(p.Hash) != 64 {
		t.Errorf("hash %q", p.Hash)
	}
}

func TestParsePlanRefuses(t *testing.T) {
	const head = "name = \"r\"\noffer = \"o.json\"\ngroup = \"g\"\n"
	const wave = "[[wave]]\npercent = 100\n"
	const halt = "[halt]\nmax_failed_percent = 5\n"
	tests := []struct {
		name, toml, key, msg string
	}{
		{"unknown top-level key", head + "colour = \"red\"\n" + wave + halt, "", "unknown key colour (line 4)"},
		{"unknown key in a wave", head + "[[wave]]\npercent = 10\nsoaks = \"1h\"\n" + halt, "", "unknown key wave.soaks (line 6)"},
		{"unknown key in halt", head + wave + halt + "max_fail = 3\n", "", "unknown key halt.max_fail"},
		{"a string where a number goes", head + "[[wave]]\npercent = \"ten\"\n" + halt, "wave[1].percent", "line 5: a number, not a string"},
		{"not TOML", "name = \n", "", ""},
		{"name missing", "offer = \"o\"\ngroup = \"g\"\n" + wave + halt, "name", "missing"},
		{"name with a dot", strings.Replace(head, `"r"`, `"fw.4"`, 1) + wave + halt, "name", "[A-Za-z0-9_-]"},
		{"name with a slash", strings.Replace(head, `"r"`, `"a/b"`, 1) + wave + halt, "name", "[A-Za-z0-9_-]"},
		{"name too long", strings.Replace(head, `"r"`, `"`+strings.Repeat("x", 65)+`"`, 1) + wave + halt, "name", "1 to 64"},
		{"group with a wildcard", strings.Replace(head, `"g"`, `"eu+"`, 1) + wave + halt, "group", "[A-Za-z0-9_-]"},
		{"offer missing", "name = \"r\"\ngroup = \"g\"\n" + wave + halt, "offer", "missing"},
		{"no waves", head + halt, "wave", "at least one"},
		{"a wave with devices and percent", head + "[[wave]]\npercent = 10\ndevices = [\"a\"]\n" + halt, "wave[1]", "both"},
		{"a wave with neither", head + "[[wave]]\nsoak = \"1h\"\n" + halt, "wave[1]", "needs devices"},
		{"an empty device list", head + "[[wave]]\ndevices = []\n" + halt, "wave[1]", "needs devices"},
		{"percent zero", head + "[[wave]]\npercent = 0\n" + halt, "wave[1].percent", "not in (0, 100]"},
		{"percent above 100", head + "[[wave]]\npercent = 100.5\n" + halt, "wave[1].percent", "not in (0, 100]"},
		{"percent nan", head + "[[wave]]\npercent = nan\n" + halt, "wave[1].percent", "not in (0, 100]"},
		{"percent decreasing", head + "[[wave]]\npercent = 20\n[[wave]]\npercent = 10\n" + halt, "wave[2].percent", "must not decrease"},
		{"a device named twice", head + "[[wave]]\ndevices = [\"a\"]\n[[wave]]\ndevices = [\"b\", \"a\"]\n" + halt, "wave[2].devices", `"a" is already in wave 1`},
		{"a device ID with a dot", head + "[[wave]]\ndevices = [\"gw.1\"]\n" + halt, "wave[1].devices", `device "gw.1"`},
		{"a negative soak", head + "[[wave]]\npercent = 5\nsoak = \"-1h\"\n" + halt, "wave[1].soak", "negative"},
		{"a soak that is not a duration", head + "[[wave]]\npercent = 5\nsoak = \"2 hours\"\n" + halt, "wave[1].soak", "not a duration"},
		{"a device_timeout that is not a duration", head + wave + halt + "device_timeout = 2\n", "halt.device_timeout", "line 8"},
		{"no halt rule", head + wave, "halt.max_failed_percent", "missing"},
		{"max_failed_percent above 100", head + wave + "[halt]\nmax_failed_percent = 101\n", "halt.max_failed_percent", "not in [0, 100]"},
		{"min_outcomes zero", head + wave + halt + "min_outcomes = 0\n", "halt.min_outcomes", "≥ 1"},
		{"device_timeout zero", head + wave + halt + "device_timeout = \"0s\"\n", "halt.device_timeout", "must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePlan([]byte(tc.toml), "plans/x.toml")
			var pe *PlanError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a PlanError", err)
			}
			if pe.Key != tc.key || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "plans/x.toml") {
				t.Errorf("error %q (key %q), want key %q and %q", err, pe.Key, tc.key, tc.msg)
			}
		})
	}
}

func TestPlanDefaults(t *testing.T) {
	p, err := ParsePlan([]byte("name = \"r\"\noffer = \"o\"\ngroup = \"g\"\n[[wave]]\npercent = 0.5\n[halt]\nmax_failed_percent = 0\n"), "x.toml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Halt != (HaltRule{MaxFailedPercent: 0, MinOutcomes: 1, DeviceTimeout: DefaultDeviceTimeout}) || p.Waves[0].Percent != 0.5 {
		t.Errorf("plan %+v", p)
	}
}

// envelope wraps a manifest in an envelope; the controller does not check
// signatures (devices do), so any signature bytes serve.
func envelope(t *testing.T, manifest string) []byte {
	t.Helper()
	b, err := verify.MarshalEnvelope([]byte(manifest), verify.Signature{Sig: []byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const testManifest = `{"schema":1,"id":"rel-9","version":"9","compatible":["c"],"issued_at":"2026-01-01T00:00:00Z",
"expires_at":"2036-01-01T00:00:00Z","payload":{"url":"https://x/i","compression":"none","size":1,"sha256":"` +
	"0123456789012345678901234567890123456789012345678901234567890123" + `"}}`

func TestPlanHash(t *testing.T) {
	base := "name = \"r\"\noffer = \"o.json\"\ngroup = \"g\"\n[[wave]]\ndevices = [\"a\"]\nsoak = \"30m\"\n[[wave]]\npercent = 100\n[halt]\nmax_failed_percent = 5\n"
	offer := envelope(t, testManifest)
	hash := func(toml string, offer []byte) string {
		t.Helper()
		p, err := ParsePlan([]byte(toml), "x.toml")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AttachOffer(offer); err != nil {
			t.Fatal(err)
		}
		return p.Hash
	}
	h := hash(base, offer)
	same := map[string]string{
		"comments and layout":  "# a plan\n" + strings.ReplaceAll(base, " = ", "=") + "\n\n",
		"defaults spelled out": base + "min_outcomes = 1\ndevice_timeout = \"2h\"\n",
		"another offer path":   strings.Replace(base, "o.json", "elsewhere/o.json", 1),
		"a duration spelled":   strings.Replace(base, `"30m"`, `"1800s"`, 1),
	}
	for name, toml := range same {
		if hash(toml, offer) != h {
			t.Errorf("%s changes the hash", name)
		}
	}
	differ := map[string]string{
		"name":        strings.Replace(base, `"r"`, `"r2"`, 1),
		"group":       strings.Replace(base, `"g"`, `"g2"`, 1),
		"canary":      strings.Replace(base, `["a"]`, `["b"]`, 1),
		"soak":        strings.Replace(base, `"30m"`, `"31m"`, 1),
		"percent":     strings.Replace(base, "percent = 100", "percent = 50", 1),
		"halt":        strings.Replace(base, "= 5", "= 6", 1),
		"min_outcome": base + "min_outcomes = 2\n",
	}
	for name, toml := range differ {
		if hash(toml, offer) == h {
			t.Errorf("a changed %s keeps the hash", name)
		}
	}
	if hash(base, envelope(t, strings.Replace(testManifest, "rel-9", "rel-10", 1))) == h {
		t.Error("another offer keeps the hash")
	}
}

func TestAttachOfferRefuses(t *testing.T) {
	p, err := ParsePlan([]byte("name = \"r\"\noffer = \"o\"\ngroup = \"g\"\n[[wave]]\npercent = 10\n[halt]\nmax_failed_percent = 5\n"), "x.toml")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		env  []byte
		want string
	}{
		"not an envelope":         {[]byte(`{"nope":1}`), "bad_envelope"},
		"a manifest that is bad":  {envelope(t, `{"schema":1}`), "bad_manifest"},
		"a manifest for devices":  {envelope(t, strings.Replace(testManifest, `"compatible"`, `"devices":["gw-1"],"compatible"`, 1)), "names devices [gw-1]"},
		"an envelope over 256KiB": {make([]byte, ota.MaxEnvelopeSize+1), "too_large"},
	} {
		err := p.AttachOffer(tc.env)
		var pe *PlanError
		if !errors.As(err, &pe) || pe.Key != "offer" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an offer error with %q", name, err, tc.want)
		}
	}
}

func TestLoadPlanOfferPath(t *testing.T) {
	dir := t.TempDir()
	plan := testtool.WriteFile(t, filepath.Join(dir, "p.toml"), []byte("name = \"r\"\noffer = \"rel/o.json\"\ngroup = \"g\"\n[[wave]]\npercent = 10\n[halt]\nmax_failed_percent = 5\n"))
	_, err := LoadPlan(plan)
	var pe *PlanError
	if !errors.As(err, &pe) || pe.Key != "offer" || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing offer: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "rel"), 0o755); err != nil {
		t.Fatal(err)
	}
	testtool.WriteFile(t, filepath.Join(dir, "rel", "o.json"), envelope(t, testManifest))
	p, err := LoadPlan(plan)
	if err != nil || p.Offer.ID != "rel-9" {
		t.Fatalf("offer relative to the plan: %v %+v", err, p)
	}
	if _, err := LoadPlan(filepath.Join(dir, "none.toml")); err == nil || !strings.Contains(err.Error(), "none.toml") {
		t.Errorf("missing plan: %v", err)
	}
}
