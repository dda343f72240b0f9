package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const minimal = `
device_id = "gw-0001"
compatible = "acme,gw-v2"
[slots]
A = "/dev/mmcblk0p2"
B = "/dev/mmcblk0p3"
`

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal), "otad.toml", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != "/var/lib/otad" || c.Bootloader.Type != "uboot" || c.Bootloader.EnvConfig != "/etc/fw_env.config" ||
		c.Bootloader.Attempts != 3 || c.Download.Retries != 3 || c.Download.Backoff.Duration != 15*time.Second ||
		c.Download.MaxBackoff.Duration != 5*time.Minute || c.Reboot.Policy != "immediate" || !*c.Slots.Readback ||
		c.MQTT.TopicPrefix != "ota" || c.Trust.Threshold != 1 || c.Download.Schemes[0] != "https" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestMachineIDDefault(t *testing.T) {
	mid := filepath.Join(t.TempDir(), "machine-id")
	os.WriteFile(mid, []byte("0123abcd\n"), 0o644)
	c, err := Parse([]byte(strings.Replace(minimal, `device_id = "gw-0001"`, "", 1)), "otad.toml", mid)
	if err != nil || c.DeviceID != "0123abcd" {
		t.Fatalf("device id %q err %v", c.DeviceID, err)
	}
	_, err = Parse([]byte(strings.Replace(minimal, `device_id = "gw-0001"`, "", 1)), "otad.toml", "/nonexistent/machine-id")
	if err == nil || !strings.Contains(err.Error(), "device_id") {
		t.Fatalf("want error naming device_id, got %v", err)
	}
}

func TestParseErrorsNameFileAndKey(t *testing.T) {
	tests := []struct {
		name, toml, want string
	}{
		{"unknown key", minimal + "\n[download]\nretrys = 3\n", "download.retrys"},
		{"bad duration", minimal + "\n[download]\nbackoff = \"soon\"\n", "backoff"},
		{"key beside its own in another case", "Compatible = \"zzz\"\n" + minimal, `Compatible: line 1: unknown key: keys are case-sensitive, the key is "compatible"`},
		{"table in another case", minimal + "\n[Slots]\na = \"/y\"\n", `Slots.a: line 9: unknown key: keys are case-sensitive, the key is "slots.A"`},
		{"leaf in another case", minimal + "\n[commit]\nWindow = \"5m\"\n", `commit.Window: line 9: unknown key: keys are case-sensitive, the key is "commit.window"`},
		{"inline table in another case", "MQTT = { broker = \"mqtt://a\" }\n" + minimal, `MQTT: line 1: unknown key: keys are case-sensitive, the key is "mqtt"`},
		{"endless retry delay", minimal + "\n[retry]\ndelay = \"1000000h\"\n", "retry.delay: 1000000h is not between 1s and 24h"},
		{"negative retry delay", minimal + "\n[retry]\ndelay = \"-1s\"\n", "retry.delay: -1s is not between 1s and 24h"},
		{"negative download retries", minimal + "\n[download]\nretries = -1\n", "download.retries: -1 is not between 0 and 100"},
		{"download retries past the range", minimal + "\n[download]\nretries = 101\n", "download.retries: 101 is not between 0 and 100"},
		{"bare number for a duration", minimal + "\n[commit]\nwindow = 300\n", `commit.window: line 9: not a duration (like "15s" or "5m"): "300": a string in quotes, with a unit ("300s")`},
		{"bare number for a top table's duration", minimal + "\n[trust]\nthreshold = 1\nclock_skew = 300\n", "trust.clock_skew: line 10:"},
		{"inline table's bare duration", "download = { backoff = 1.5 }\n" + minimal, `download.backoff: line 1: not a duration (like "15s" or "5m"): "1.5": a string in quotes, with a unit ("1.5s")`},
		{"boolean for a duration", minimal + "\n[commit]\nwindow = true\n", `commit.window: line 9: not a duration (like "15s" or "5m"): "true": a string in quotes`},
		{"bad type", minimal + "\n[bootloader]\ntype = \"lilo\"\n", "bootloader.type"},
		{"grub needs env_file", minimal + "\n[bootloader]\ntype = \"grub\"\n", "bootloader.env_file"},
		{"missing compatible", strings.Replace(minimal, `compatible = "acme,gw-v2"`, "", 1), "compatible"},
		{"missing slot", strings.Replace(minimal, `B = "/dev/mmcblk0p3"`, "", 1), "slots.B"},
		{"same slots", strings.Replace(minimal, `/dev/mmcblk0p3`, "/dev/mmcblk0p2", 1), "slots.B"},
		{"bad scheme", minimal + "\n[download]\nschemes = [\"ftp\"]\n", "download.schemes"},
		{"bad policy", minimal + "\n[reboot]\npolicy = \"later\"\n", "reboot.policy"},
		{"bad broker", minimal + "\n[mqtt]\nbroker = \"http://x:1\"\n", "mqtt.broker"},
		{"bad node of a cluster", minimal + "\n[mqtt]\nbrokers = [\"mqtt://a:1883\", \"ftp://b\"]\n", "mqtt.brokers[1]: scheme \"ftp\""},
		{"a cluster mixing TLS and not", minimal + "\n[mqtt]\nbrokers = [\"mqtts://a\", \"mqtt://b\"]\n", "mqtt.brokers[1]: \"mqtt://b\" mixes"},
		{"broker and brokers", minimal + "\n[mqtt]\nbroker = \"mqtt://a\"\nbrokers = [\"mqtt://b\"]\n", "mqtt.brokers: set with mqtt.broker too"},
		{"cert without key", minimal + "\n[mqtt]\nbroker = \"mqtts://x:8883\"\ncert_file = \"c.pem\"\n", "mqtt.cert_file"},
		{"wrong type", minimal + "\n[bootloader]\nattempts = \"three\"\n", "attempts"},
		{"negative attempts", minimal + "\n[bootloader]\nattempts = -1\n", "bootloader.attempts"},
		{"attempts beyond RAUC's", minimal + "\n[bootloader]\nattempts = 2147483648\n", "bootloader.attempts"},
		{"syntax", minimal + "\n[slots\n", "line"},
		{"relative health command", minimal + "\n[commit]\nhealth_command = [\"health-check\"]\n", "commit.health_command"},
		{"empty health command", minimal + "\n[commit]\nhealth_command = [\"\"]\n", "commit.health_command"},
		{"download cert without key", minimal + "\n[download]\ncert_file = \"c.pem\"\n", "download.cert_file"},
		{"slash in device id", strings.Replace(minimal, "gw-0001", "gw/1", 1), "device_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.toml), "/etc/otad/otad.toml", "")
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "/etc/otad/otad.toml") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name the file and %q", err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(minimal + "\n[mqtt]\nbroker = \"mqtt://127.0.0.1:1883\"\ngroups = [\"canary\"]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b, "f.toml", "")
		if err == nil && (c.Compatible == "" || c.Slots.A == "" || c.Slots.A == c.Slots.B) {
			t.Fatalf("invalid config accepted: %+v", c)
		}
	})
}

// Every wrong value is named, not only the first; Decode still returns the
// config with its defaults for the checks that follow.
func TestEveryProblemNamed(t *testing.T) {
	c, err := Decode([]byte("device_id = \"gw-1\"\n[reboot]\npolicy = \"later\"\n"), "/etc/otad/otad.toml", "")
	if c == nil || c.StateDir != "/var/lib/otad" {
		t.Fatalf("Decode returned %+v", c)
	}
	var lines []string
	for _, key := range []string{"compatible", "slots.A", "slots.B", "reboot.policy"} {
		line := "/etc/otad/otad.toml: " + key + ": "
		if !strings.Contains(err.Error(), line) {
			t.Errorf("error lacks %q:\n%v", line, err)
		}
		lines = append(lines, line)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(lines) {
		t.Errorf("%d problems, want %d:\n%v", n, len(lines), err)
	}
	// A value of the wrong type is named with the type the key wants.
	// Issue 31: in a config writer's words, not go-toml's Go types.
	for _, c := range []struct{ toml, want string }{
		{"device_id = 5\n", "f.toml: device_id: line 1 column 13: a string in quotes, not a whole number"},
		{"[trust]\nthreshold = \"2\"\n", "f.toml: trust.threshold: line 2 column 13: a whole number, not a string (leave out the quotes)"},
		{"[mqtt]\ngroups = \"a\"\n", "f.toml: mqtt.groups: line 2 column 10: a list [...], not a string"},
	} {
		if _, err := Decode([]byte(c.toml), "f.toml", ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("wrong type %q: %v, want %q", c.toml, err, c.want)
		}
	}
	// A typo'd key does not hide the other problems.
	c, err = Decode([]byte("device_id = \"gw-1\"\ncompatibel = \"x\"\n[reboot]\npolicy = \"later\"\n"), "f.toml", "")
	for _, want := range []string{`f.toml: unknown key compatibel (line 2) (did you mean "compatible"?)`, "f.toml: compatible: ", "f.toml: reboot.policy: "} {
		if c == nil || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("typo'd key: error lacks %q:\n%v", want, err)
		}
	}
	if _, err := Parse([]byte("device_id = \"gw-1\"\n"), "f.toml", ""); err == nil {
		t.Error("Parse accepted what Decode refused")
	}
}

// Attempts beyond 9 are fine: the U-Boot counters are hex, as RAUC writes them.
func TestAttemptsAsRAUCAllows(t *testing.T) {
	for _, n := range []int{1, 9, 10, 255, 2147483647} {
		c, err := Parse([]byte(fmt.Sprintf("%s\n[bootloader]\nattempts = %d\n", minimal, n)), "otad.toml", "")
		if err != nil || c.Bootloader.Attempts != n {
			t.Errorf("attempts = %d: %v, %+v", n, err, c)
		}
	}
}

// Issue 21: every duration has a range; a negative grace or pause is
// refused, naming the key and the range, never accepted and misprinted.
func TestDurationRanges(t *testing.T) {
	tests := []struct {
		table, key, value, want string
	}{
		{"trust", "clock_skew", "-5m", "trust.clock_skew: -5m is not between 1s and 24h"},
		{"trust", "clock_skew", "48h", "trust.clock_skew: 48h is not between 1s and 24h"},
		{"trust", "skew_allowance", "-1h", "trust.skew_allowance: -1h is not between 1m and 168h"},
		{"trust", "skew_allowance", "1s", "trust.skew_allowance: 1s is not between 1m and 168h"},
		{"download", "backoff", "-15s", "download.backoff: -15s is not between 1ms and 1h"},
		{"download", "max_backoff", "-1s", "download.max_backoff: -1s is not between 1ms and 24h"},
		{"commit", "window", "-5m", "commit.window: -5m is not between 1s and 24h"},
		{"commit", "window", "720h", "commit.window: 720h is not between 1s and 24h"},
	}
	for _, tc := range tests {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			_, err := Parse([]byte(fmt.Sprintf("%s\n[%s]\n%s = %q\n", minimal, tc.table, tc.key, tc.value)), "otad.toml", "")
			if err == nil || !strings.Contains(err.Error(), "otad.toml: "+tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Fatalf("one wrong value, more than one error: %v", err)
			}
		})
	}
	// The bounds themselves are accepted, and printed as a config writes them.
	c, err := Parse([]byte(minimal+"\n[trust]\nclock_skew = \"24h\"\nskew_allowance = \"1m\"\n[download]\nbackoff = \"1h\"\nmax_backoff = \"1h30m\"\n[commit]\nwindow = \"1s\"\n"), "otad.toml", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.Trust.ClockSkew, " ", c.Download.MaxBackoff, " ", c.Commit.Window); got != "24h 1h30m 1s" {
		t.Fatalf("printed %q", got)
	}
}
