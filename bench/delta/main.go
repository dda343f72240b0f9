package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/otad/otad/internal/cli"
)

func main() { cli.Tool("deltabench", run) }

type options struct {
	otad, otactl string
	cache        string
	rebuild      bool
	size         int64
	ro           string
	suite        string
	to           string
	mirror       string
	security     string
	rounds       int
	readback     bool
	zstdLevel    int
	keep         bool
	cpus         string
}

func defaultCache() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "otad-bench-delta")
	}
	return filepath.Join(os.TempDir(), "otad-bench-delta")
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet("deltabench", "-otad BIN -otactl BIN [-size 1GiB] [flags]", stderr)
	fs.StringVar(&o.otad, "otad", "", "the otad binary (required; `make build` puts it in bin/otad)")
	fs.StringVar(&o.otactl, "otactl", "", "the otactl binary that signs the payloads (required; bin/otactl)")
	fs.StringVar(&o.cache, "cache", defaultCache(), "work directory: the root file systems and images (reused when present), the payloads and devices of the run")
	fs.BoolVar(&o.rebuild, "rebuild", false, "build the root file systems and images again, from the mirror")
	sizeFlag := fs.String("size", "1GiB", "the ext4 image size: bytes, or with KiB, MiB, GiB")
	fs.StringVar(&o.ro, "ro", roSquashfs, "the compressed read-only file system: squashfs (mksquashfs -comp zstd) or erofs (mkfs.erofs -zlz4hc)")
	fs.StringVar(&o.suite, "suite", "bookworm", "the Debian release of the pair")
	fs.StringVar(&o.to, "to", "", "the larger step: new is old upgraded to this release (e.g. trixie, apt-get full-upgrade), cached in CACHE/SUITE-to-TO")
	fs.StringVar(&o.mirror, "mirror", "", "the Debian mirror (default: the one the machine's apt sources name for the suite)")
	fs.StringVar(&o.security, "security-mirror", "", "the Debian security mirror (default: the apt sources', else MIRROR/../debian-security)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of the timed installs, interleaved; wall times are medians, peak RSS the largest")
	fs.BoolVar(&o.readback, "readback", false, "[slots] readback on for every install (off: the write path alone, as `make bench` compares it)")
	fs.IntVar(&o.zstdLevel, "zstd-level", 19, "the level of the zstd --patch-from peer")
	fs.StringVar(&o.cpus, "cpus", "0", "taskset -c CPUS for every install and the peers' decodes: one core, as a device has (\"\" for all)")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's payloads and devices (CACHE/run)")
	if err := cli.ParseNone(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.size, err = cli.ParseBytes(*sizeFlag); err != nil || o.size < 64<<20 {
		return o, fmt.Errorf("-size %q: want a size of at least 64MiB (%v)", *sizeFlag, err)
	}
	switch {
	case o.otad == "" || o.otactl == "":
		return o, errors.New("-otad and -otactl: required (make build puts them in bin/)")
	case o.rounds < 1:
		return o, fmt.Errorf("-rounds: %d is not positive", o.rounds)
	case o.ro != roSquashfs && o.ro != roErofs:
		return o, fmt.Errorf("-ro: %q is not %s or %s", o.ro, roSquashfs, roErofs)
	case o.to == o.suite:
		return o, fmt.Errorf("-to: %q is the suite itself", o.to)
	case o.zstdLevel < 1 || o.zstdLevel > 22:
		return o, fmt.Errorf("-zstd-level: %d is not 1 to 22", o.zstdLevel)
	}
	for _, p := range []*string{&o.otad, &o.otactl} {
		if *p, err = filepath.Abs(*p); err != nil {
			return o, err
		}
		if st, err := os.Stat(*p); err != nil || st.Mode()&0o111 == 0 {
			return o, fmt.Errorf("%s is not an executable file (run `make build`)", *p)
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, out, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.to != "" {
		// A pair of its own: both steps stay cached side by side.
		o.cache = filepath.Join(o.cache, o.suite+"-to-"+o.to)
	}
	if err := os.MkdirAll(o.cache, 0o755); err != nil {
		return fmt.Errorf("-cache: %w", err)
	}
	p, err := ensurePair(ctx, o, out)
	if err != nil {
		return err
	}
	p.describe(out)
	logf, err := os.OpenFile(logPath(o.cache), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	r := runner{log: logf}
	if msg := missingTools(benchTools(o), lookPath); msg != "" {
		return errors.New(msg)
	}
	pairs, err := renderPairs(ctx, r, o.cache, o.size, o.ro, out)
	if err != nil {
		return err
	}
	return measurePairs(ctx, o, r, pairs, out)
}

// ensurePair reuses the cached pair or builds it, after checking that it
// can: root, debootstrap, a reachable mirror.
func ensurePair(ctx context.Context, o options, out io.Writer) (*pair, error) {
	if o.rebuild {
		for _, d := range []string{"rootfs", "images"} {
			if err := os.RemoveAll(filepath.Join(o.cache, d)); err != nil {
				return nil, err
			}
		}
	}
	if p, err := loadPair(o.cache); err != nil || p != nil {
		if p != nil {
			fmt.Fprintf(out, "reusing the pair in %s (built %s; -rebuild builds it again)\n", o.cache, p.Built.Format(time.DateTime))
		}
		return p, err
	}
	// Rendered from an older pair: no longer theirs.
	if err := os.RemoveAll(filepath.Join(o.cache, "images")); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("building the image pair needs root (debootstrap, chroot, mount): run `sudo make bench-delta`")
	}
	if msg := missingTools([]tool{toolDebootstrap, toolDpkgQuery}, lookPath); msg != "" {
		return nil, fmt.Errorf("cannot build the image pair: %s", msg)
	}
	m, err := o.findMirror()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath(o.cache), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	return buildPair(ctx, runner{log: logf}, o.cache, step{suite: o.suite, to: o.to}, m, out)
}

func (o options) findMirror() (mirror, error) {
	if o.mirror != "" {
		m := mirror{main: o.mirror, security: o.security, from: "-mirror"}
		if m.security == "" {
			m.security = trimDebian(o.mirror) + "/debian-security"
		}
		return m, nil
	}
	sources, err := readSources(sourceFiles("/"))
	if err != nil {
		return mirror{}, err
	}
	m, err := findMirror(sources, o.suite)
	if o.security != "" {
		m.security = o.security
	}
	return m, err
}

// benchTools are what the measurements need once the images exist.
func benchTools(o options) []tool {
	ro := toolMksquashfs
	if o.ro == roErofs {
		ro = toolMkfsErofs
	}
	return []tool{toolMkfsExt4, ro, toolXdelta3, toolCasync, toolZstd}
}
