package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/otad/otad/durable"
)

// gatewayPackages are added to debootstrap's minbase: what a small Linux
// gateway runs (init, udev, networking, ssh, time, firewall, TLS, Python
// for the odd script), about 180 packages in all.
var gatewayPackages = []string{
	"systemd", "systemd-sysv", "systemd-timesyncd", "udev", "dbus", "libpam-systemd", "kmod",
	"iproute2", "iputils-ping", "netbase", "ifupdown", "isc-dhcp-client", "nftables", "ethtool", "iw", "wpasupplicant",
	"openssh-server", "ca-certificates", "curl", "openssl", "sudo", "procps", "less", "vim-tiny", "logrotate", "cron",
	"tzdata", "e2fsprogs", "libubootenv-tool", "tcpdump", "jq", "python3-minimal", "bash-completion",
}

// pair is what the two root file systems are: a release as debootstrap
// makes it, and the same after the security and stable updates.
type pair struct {
	Suite       string    `json:"suite"`
	To          string    `json:"to,omitempty"` // a release upgrade's target
	ToRel       string    `json:"to_release,omitempty"`
	Mirror      string    `json:"mirror"`
	Security    string    `json:"security_mirror"`
	Base        string    `json:"base"`     // the suite's Release: codename, version, date
	Updates     string    `json:"updates"`  // SUITE-updates' Release date
	SecurityRel string    `json:"security"` // SUITE-security's Release date
	OldPackages int       `json:"old_packages"`
	NewPackages int       `json:"new_packages"`
	Upgraded    []upgrade `json:"upgraded"`
	Built       time.Time `json:"built"`
}

type upgrade struct{ Name, From, To string }

// step is how far new is from old: the suite's monthly update (to empty),
// or a release upgrade from suite to the release to, the larger step.
type step struct{ suite, to string }

// newSuite is the release new runs.
func (s step) newSuite() string {
	if s.to != "" {
		return s.to
	}
	return s.suite
}

func (p *pair) describe(w io.Writer) {
	fmt.Fprintf(w, "pair: old = %s from %s, debootstrap minbase + %d gateway packages: %d packages installed\n",
		p.Base, p.Mirror, len(gatewayPackages), p.OldPackages)
	if p.To != "" {
		fmt.Fprintf(w, "      new = old upgraded to %s with %s-security (%s) and %s-updates (%s), apt-get full-upgrade: %d packages, %d upgraded\n",
			p.ToRel, p.To, p.SecurityRel, p.To, p.Updates, p.NewPackages, len(p.Upgraded))
	} else {
		fmt.Fprintf(w, "      new = old + %s-security (%s) and %s-updates (%s), apt-get upgrade: %d packages, %d upgraded\n",
			p.Suite, p.SecurityRel, p.Suite, p.Updates, p.NewPackages, len(p.Upgraded))
	}
	const max = 40
	names := make([]string, 0, len(p.Upgraded))
	for _, u := range p.Upgraded {
		names = append(names, u.Name+" "+u.From+" → "+u.To)
	}
	if len(names) > max {
		names = append(names[:max], fmt.Sprintf("… and %d more", len(names)-max))
	}
	if len(names) > 0 {
		fmt.Fprintf(w, "      upgraded: %s\n", strings.Join(names, "; "))
	}
}

// rootfsDirs are the two trees under the cache's rootfs/.
func rootfsDirs(cache string) (old, new, meta string) {
	d := filepath.Join(cache, "rootfs")
	return filepath.Join(d, "old"), filepath.Join(d, "new"), filepath.Join(d, "pair.json")
}

// loadPair reads the pair a previous run built; nil when there is none
// (pair.json is written last, so a half-built pair has none).
func loadPair(cache string) (*pair, error) {
	_, _, meta := rootfsDirs(cache)
	b, err := os.ReadFile(meta)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p pair
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w (run with -rebuild)", meta, err)
	}
	return &p, nil
}

// buildPair debootstraps the old tree from the mirror, copies it and runs
// the step's update in the copy, and records what the pair is.
func buildPair(ctx context.Context, r runner, cache string, st step, m mirror, out io.Writer) (*pair, error) {
	suite, to := st.suite, st.newSuite()
	oldDir, newDir, meta := rootfsDirs(cache)
	unreachable := func(uri, from string, err error) error {
		return fmt.Errorf("cannot reach the Debian mirror %s (%s): %w\nthe image pair is built with debootstrap from the machine's mirror: "+
			"check the network, or name a mirror that answers with -mirror URL (and -security-mirror URL)", uri, from, err)
	}
	base, err := fetchRelease(ctx, m.main, suite)
	if err != nil {
		return nil, unreachable(m.main, m.from, err)
	}
	toRel := base
	if st.to != "" {
		if toRel, err = fetchRelease(ctx, m.main, to); err != nil {
			return nil, unreachable(m.main, m.from, err)
		}
	}
	upd, err := fetchRelease(ctx, m.main, to+"-updates")
	if err != nil {
		return nil, unreachable(m.main, m.from, err)
	}
	sec, err := fetchRelease(ctx, m.security, to+"-security")
	if err != nil {
		return nil, unreachable(m.security, "the security suite's", err)
	}
	for _, d := range []string{oldDir, newDir} {
		if err := os.RemoveAll(d); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(oldDir), 0o755); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "debootstrap of Debian %s from %s into %s: a few minutes…\n", base, m.main, oldDir)
	start := time.Now()
	if err := r.run(ctx, 40*time.Minute, "debootstrap", "--variant=minbase", "--include="+strings.Join(gatewayPackages, ","),
		"--components=main", suite, oldDir, m.main); err != nil {
		return nil, fmt.Errorf("debootstrap (log: %s): %w", logPath(cache), err)
	}
	if err := tidyRootfs(oldDir); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  old tree built in %v; copying it and running the update…\n", time.Since(start).Round(time.Second))
	start = time.Now()
	if err := r.run(ctx, 10*time.Minute, "cp", "-a", "--reflink=auto", oldDir, newDir); err != nil {
		return nil, err
	}
	if err := upgradeRootfs(ctx, r, newDir, st, m); err != nil {
		return nil, fmt.Errorf("the update in %s (log: %s): %w", newDir, logPath(cache), err)
	}
	fmt.Fprintf(out, "  new tree updated in %v\n", time.Since(start).Round(time.Second))
	oldPkgs, err := installedPackages(ctx, oldDir)
	if err != nil {
		return nil, err
	}
	newPkgs, err := installedPackages(ctx, newDir)
	if err != nil {
		return nil, err
	}
	p := &pair{Suite: suite, To: st.to, ToRel: toRel.String(), Mirror: m.main, Security: m.security, Base: base.String(), Updates: upd.date, SecurityRel: sec.date,
		OldPackages: len(oldPkgs), NewPackages: len(newPkgs), Upgraded: diffPackages(oldPkgs, newPkgs), Built: time.Now().UTC()}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return p, durable.WriteFile(meta, append(b, '\n'), 0o644)
}

// upgradeRootfs is the step's update, in a chroot, no service started:
// the monthly one (the update suites added to the sources, apt-get
// upgrade), or the release upgrade (the sources naming the next release and
// its update suites, apt-get full-upgrade, as Debian's release notes do it).
func upgradeRootfs(ctx context.Context, r runner, root string, st step, m mirror) error {
	suite, upgrade := st.newSuite(), "upgrade"
	if st.to != "" {
		upgrade = "full-upgrade"
	}
	sources := fmt.Sprintf("deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n",
		m.main, suite, m.main, suite, m.security, suite)
	if err := os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte(sources), 0o644); err != nil {
		return err
	}
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return err
	}
	proc := filepath.Join(root, "proc")
	if err := r.run(ctx, time.Minute, "mount", "-t", "proc", "proc", proc); err != nil {
		return err
	}
	// A fresh context: the mount goes even when ctx ended.
	defer r.run(context.Background(), time.Minute, "umount", "-l", proc)
	env := []string{"env", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	for _, args := range [][]string{
		{"apt-get", "update"},
		{"apt-get", "-y", "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold", upgrade},
	} {
		if err := r.run(ctx, 30*time.Minute, "chroot", append(append([]string{root}, env...), args...)...); err != nil {
			return err
		}
	}
	if err := os.Remove(policy); err != nil {
		return err
	}
	return tidyRootfs(root)
}

// tidyRootfs drops what an image build drops on both sides: the package
// cache and the downloaded lists.
func tidyRootfs(root string) error {
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*"} {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return err
		}
		for _, f := range m {
			if filepath.Base(f) == "lock" || filepath.Base(f) == "partial" {
				continue
			}
			if err := os.RemoveAll(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// installedPackages lists root's installed packages and their versions.
func installedPackages(ctx context.Context, root string) (map[string]string, error) {
	var b bytes.Buffer
	r := runner{log: io.Discard}
	if _, err := r.output(ctx, time.Minute, &b, "dpkg-query", "--admindir="+filepath.Join(root, "var/lib/dpkg"),
		"-W", "-f", "${db:Status-Status} ${binary:Package} ${Version}\n"); err != nil {
		return nil, err
	}
	return parsePackages(b.String()), nil
}

// parsePackages reads dpkg-query's "STATUS NAME VERSION" lines, keeping the
// installed ones.
func parsePackages(s string) map[string]string {
	pkgs := map[string]string{}
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "installed" {
			pkgs[f[1]] = f[2]
		}
	}
	return pkgs
}

// diffPackages lists the packages whose version changed, by name.
func diffPackages(old, new map[string]string) []upgrade {
	var ups []upgrade
	for name, v := range new {
		if was, ok := old[name]; ok && was != v {
			ups = append(ups, upgrade{name, was, v})
		}
	}
	slices.SortFunc(ups, func(a, b upgrade) int { return strings.Compare(a.Name, b.Name) })
	return ups
}

func logPath(cache string) string { return filepath.Join(cache, "build.log") }
