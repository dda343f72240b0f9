package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/statelock"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/tlsfiles"
	"github.com/otad/otad/verify"
)

// The start-up checks: what `otad run` refuses to start on, and what it
// starts with but warns of. Build runs them to open the parts; Check runs
// the same code for `otad config check`, which therefore reports each
// refusal with the message and the exit code run would end with
// (docs/contract/commands.md).

// Refusal is why otad run does not start: the config file, the key whose
// value is at fault, and the exit code run ends with.
type Refusal struct {
	Path string
	Key  string // "" when no key is at fault
	Code int
	Err  error
}

func (r *Refusal) Error() string {
	if r.Key == "" {
		return fmt.Sprintf("%s: %v", r.Path, r.Err)
	}
	return fmt.Sprintf("%s: %s: %v", r.Path, r.Key, r.Err)
}

func (r *Refusal) Unwrap() error { return r.Err }

// refuse is a bad value of key: exit 2, as for a bad config file.
func refuse(cfg *config.Config, key string, err error) *Refusal {
	return &Refusal{Path: cfg.Path, Key: key, Code: ota.ExitUsage, Err: err}
}

// StateDirRefusal is state_dir's refusal, when err (statelock's) is one: a
// directory others could write, or a path that is not or cannot be made a
// directory. Other errors (a lock file that does not open) are not refusals
// of the config.
func StateDirRefusal(cfg *config.Config, err error) *Refusal {
	if !errors.Is(err, statelock.ErrUnsafeDir) && !errors.Is(err, statelock.ErrNoDir) {
		return nil
	}
	return refuse(cfg, "state_dir", err)
}

// Warning is something otad run starts with, saying so in its log, that
// will fail later: an install into a slot device that does not open, an
// offer with too few trusted keys to verify, a health check that cannot run.
type Warning struct {
	Key  string
	Path string // the file or device at fault
	Msg  string // what otad does about it, for the log
	Err  error
}

// Check runs the checks otad run makes before it starts, without starting
// anything, creating a file or taking the state lock. It returns every
// refusal, in the order run meets them (run ends with the first one's code),
// and the warnings run would log.
func Check(cfg *config.Config) ([]*Refusal, []Warning) {
	var refusals []*Refusal
	if r := StateDirRefusal(cfg, statelock.Check(cfg.StateDir)); r != nil {
		refusals = append(refusals, r)
	}
	log := slog.New(slog.DiscardHandler)
	if _, r := openBoot(cfg, log, true); r != nil {
		refusals = append(refusals, r)
		if r.Key == "slots.cmdline" && cfg.Bootloader.Type != "sim" {
			// The check reports every problem at once (docs/contract/config.md):
			// the environment is read too, the booted slot unknown.
			if _, r := openEnv(cfg, log, ""); r != nil {
				refusals = append(refusals, r)
			}
		}
	}
	var kr *verify.Keyring
	keys, r := openKeys(cfg, log)
	if r != nil {
		refusals = append(refusals, r)
	} else {
		kr = keys.Keyring()
	}
	if _, r := downloadTLS(cfg); r != nil {
		refusals = append(refusals, r)
	}
	if r := CheckMQTT(cfg); r != nil {
		refusals = append(refusals, r)
	}
	return refusals, warnings(cfg, kr)
}

// CheckMQTT refuses [mqtt] TLS files that do not load, as the daemon does
// before it dials.
func CheckMQTT(cfg *config.Config) *Refusal {
	if !cfg.MQTT.Enabled() {
		return nil
	}
	f := tlsfiles.Files{Section: "mqtt", CAFile: cfg.MQTT.CAFile, CertFile: cfg.MQTT.CertFile, KeyFile: cfg.MQTT.KeyFile}
	if _, err := f.Config(""); err != nil {
		return tlsRefusal(cfg, "mqtt", err)
	}
	return nil
}

// boot is what the boot checks open.
type boot struct {
	bl     bootctl.Bootloader
	booted ota.Slot
	bootID string
	reboot agentRebooter
}

// openBoot reads the booted slot, opens the bootloader backend and reads
// the boot environment once. probe (otad config check) only looks: a sim
// device's state file is not created.
func openBoot(cfg *config.Config, log *slog.Logger, probe bool) (boot, *Refusal) {
	b := cfg.Bootloader
	if b.Type == "sim" {
		if _, err := os.Stat(b.EnvFile); probe && errors.Is(err, os.ErrNotExist) {
			// The first run creates it; its directory must be there.
			if _, err := os.Stat(filepath.Dir(b.EnvFile)); err != nil {
				return boot{}, refuse(cfg, "bootloader.env_file", fmt.Errorf("the directory of the sim bootloader's file: %w", err))
			}
			return boot{}, nil
		}
		return openSim(cfg)
	}
	booted, err := slots.ReadBooted(cfg.Slots.Cmdline, cfg.Slots.Devices())
	if err != nil {
		return boot{}, refuse(cfg, "slots.cmdline", err)
	}
	bl, r := openEnv(cfg, log, booted)
	if r != nil {
		return boot{}, r
	}
	id, err := os.ReadFile(BootIDFile)
	if err != nil {
		return boot{}, &Refusal{Path: cfg.Path, Code: ota.ExitFailure, Err: fmt.Errorf("boot id: %w", err)}
	}
	return boot{bl: bl, booted: booted, bootID: trimSpace(id), reboot: SystemReboot{}}, nil
}

// openEnv opens the bootloader backend and reads its environment once;
// booted ("" when the command line names none) goes into the recovery text.
func openEnv(cfg *config.Config, log *slog.Logger, booted ota.Slot) (bootctl.Bootloader, *Refusal) {
	bl, key, err := openBackend(cfg, log)
	if err == nil {
		err = checkBootEnv(bl)
	}
	if errors.Is(err, bootctl.ErrBadEnv) {
		return nil, &Refusal{Path: cfg.Path, Key: key, Code: ota.ExitNeedsOperator, Err: &BootEnvError{Err: err, Recovery: recovery(cfg, booted)}}
	}
	if err != nil {
		return nil, refuse(cfg, key, err)
	}
	return bl, nil
}

// openKeys reads the root of trust, or without one the trust directory.
func openKeys(cfg *config.Config, log *slog.Logger) (*Keys, *Refusal) {
	if cfg.Trust.Root != "" {
		keys, err := LoadRoot(cfg.Trust.Root, cfg.StateDir, nil, log)
		if err != nil {
			return nil, refuse(cfg, "trust.root", err)
		}
		return keys, nil
	}
	keys, err := LoadKeys(cfg.Trust.KeysDir, log)
	if err != nil {
		return nil, refuse(cfg, "trust.keys_dir", err)
	}
	return keys, nil
}

// downloadTLS is the HTTP client's TLS config from [download].
func downloadTLS(cfg *config.Config) (*tls.Config, *Refusal) {
	dl := cfg.Download
	tc, err := tlsfiles.Files{Section: "download", CAFile: dl.CAFile, CertFile: dl.CertFile, KeyFile: dl.KeyFile}.Config("")
	if err != nil {
		return nil, tlsRefusal(cfg, "download", err)
	}
	return tc, nil
}

func tlsRefusal(cfg *config.Config, section string, err error) *Refusal {
	var te *tlsfiles.Error
	if errors.As(err, &te) {
		return refuse(cfg, te.Key, errors.New(te.Msg))
	}
	return refuse(cfg, section, err)
}

// warnings are what run starts with but an install or a commit will trip
// on; kr is the trusted keyring (nil: the directory did not read, a refusal).
func warnings(cfg *config.Config, kr *verify.Keyring) []Warning {
	var ws []Warning
	for _, p := range SlotProblems(cfg) {
		ws = append(ws, Warning{Key: p.Key, Path: p.Device, Msg: "slot device not usable: installs into it will fail", Err: p.Err})
	}
	if kr != nil && kr.Len() < cfg.Trust.Threshold {
		ws = append(ws, Warning{Key: "trust.keys_dir", Path: cfg.Trust.KeysDir, Msg: "too few trusted keys: every offer is refused",
			Err: fmt.Errorf("%d usable public keys, trust.threshold is %d: put the release public key (PEM, from otactl keygen) there", kr.Len(), cfg.Trust.Threshold)})
	}
	if h := cfg.Commit.HealthCommand; len(h) > 0 && filepath.IsAbs(h[0]) {
		if st, err := os.Stat(h[0]); err != nil {
			ws = append(ws, Warning{Key: "commit.health_command", Path: h[0], Msg: "health check cannot run: every update rolls back", Err: err})
		} else if st.Mode()&0o111 == 0 || st.IsDir() {
			ws = append(ws, Warning{Key: "commit.health_command", Path: h[0], Msg: "health check cannot run: every update rolls back", Err: errors.New("not an executable file")})
		}
	}
	return ws
}

// SlotProblem is a configured slot device that cannot be written: it does
// not open, or it is neither a block device nor a regular file.
type SlotProblem struct {
	Key    string // slots.A or slots.B
	Device string
	Err    error
}

// SlotProblems checks the configured slot devices open and have a size,
// and that slots.B is not slots.A by another name.
func SlotProblems(cfg *config.Config) []SlotProblem {
	var out []SlotProblem
	for _, s := range []struct{ key, dev string }{{"slots.A", cfg.Slots.A}, {"slots.B", cfg.Slots.B}} {
		if s.dev == "" {
			continue // the config file's check names it
		}
		if _, err := slots.Capacity(s.dev); err != nil {
			out = append(out, SlotProblem{Key: s.key, Device: s.dev, Err: err})
		}
	}
	if len(out) == 0 && cfg.Slots.A != cfg.Slots.B && sameSlot(cfg.Slots.A, cfg.Slots.B) {
		// The file's check compares the strings only; a symlink or
		// /dev/disk/by-partlabel/… reaches the same device, and every
		// install would then overwrite the running slot or fail.
		out = append(out, SlotProblem{Key: "slots.B", Device: cfg.Slots.B,
			Err: fmt.Errorf("the same device as slots.A (%s)", cfg.Slots.A)})
	}
	return out
}

// sameSlot reports whether a and b are one file or device: the same file
// after symlinks, or device nodes of the same device number.
func sameSlot(a, b string) bool {
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	if errA == nil && errB == nil && ra == rb {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return false
	}
	if os.SameFile(fa, fb) {
		return true
	}
	sa, okA := fa.Sys().(*syscall.Stat_t)
	sb, okB := fb.Sys().(*syscall.Stat_t)
	isDev := func(fi os.FileInfo) bool { return fi.Mode()&os.ModeDevice != 0 }
	return okA && okB && isDev(fa) && isDev(fb) && sa.Rdev == sb.Rdev
}
