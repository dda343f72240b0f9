#!/usr/bin/env bash
# CI for the Debian packages (docs/contract/packaging.md, issue 12): build them for amd64, arm64
# and armhf; lintian (no errors; a warning must be explained in
# packaging/README.md); install the amd64 one on this machine and check it,
# then remove (state kept) and purge (state gone); run the arm64 and armhf
# binaries under qemu-user-static, down to a sim-device install ending staged.
# Needs root and scripts/deps/apt.txt installed. Leaves nothing installed.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n== ci-deb: %s\n' "$*"; }
fail() { echo "ci-deb: FAIL: $*" >&2; exit 1; }

if dpkg-query -W -f '${Status}' otad 2>/dev/null | grep -q installed; then
	fail "otad is already installed on this machine; this check would remove it"
fi
tmp=$(mktemp -d)
trap 'dpkg -P otad >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

step "make deb"
rm -rf dist
make -s deb
ls -l dist/
# One version: the package's, and what each binary says (packaging/version).
version=$(make -s version)
want="otad $version"
for arch in amd64 arm64 armhf; do
	[ -f dist/otad_"$version"_"$arch".deb ] || fail "no package otad_${version}_$arch.deb in dist/"
	[ "$(dpkg-deb -f dist/otad_"$version"_"$arch".deb Version)" = "$version" ] || fail "$arch package version is not $version"
done
make -s build
for b in otad otactl otasim; do
	[ "$(bin/$b --version)" = "$b $version" ] || fail "$b --version: $(bin/$b --version), want $b $version"
done

step "lintian"
# (grep finds nothing to keep when lintian is silent: not a failure.)
lintian --fail-on error dist/*.deb >"$tmp/lintian.raw" 2>&1 || { cat "$tmp/lintian.raw"; fail "lintian reported errors"; }
grep -v 'running with root privileges' "$tmp/lintian.raw" | tee "$tmp/lintian" || true
for tag in $(awk '$1 == "W:" {print $3}' "$tmp/lintian" | sort -u); do
	grep -q -- "$tag" packaging/README.md || fail "lintian warning $tag is not explained in packaging/README.md"
done

step "dpkg -i (amd64)"
dpkg -i dist/otad_*_amd64.deb
[ "$(otad version)" = "$want" ] || fail "otad version: $(otad version), want $want"
[ "$(otad --version)" = "$want" ] || fail "otad --version: $(otad --version), want $want"
[ "$(otactl --version)" = "otactl $version" ] || fail "otactl --version: $(otactl --version), want otactl $version"
[ "$(dpkg-query -W -f '${Version}' otad)" = "$version" ] || fail "installed version $(dpkg-query -W -f '${Version}' otad), want $version"
otactl help >/dev/null || fail "otactl help"
[ "$(stat -c %a /var/lib/otad)" = 700 ] || fail "/var/lib/otad: mode $(stat -c %a /var/lib/otad), want 700"
grep -qx /etc/otad/otad.toml /var/lib/dpkg/info/otad.conffiles || fail "otad.toml is not a conffile"
[ -d /etc/otad/keys.d ] && [ -x /usr/libexec/otad/health-check ] || fail "keys.d or the health check missing"
[ -f /usr/share/bash-completion/completions/otad ] && [ -f /usr/share/bash-completion/completions/otactl ] || fail "bash completion missing"
# Neither enabled nor started (systemd need not run here to see the first).
[ ! -e /etc/systemd/system/multi-user.target.wants/otad.service ] || fail "the package enabled otad.service"
if [ -d /run/systemd/system ]; then
	! systemctl is-active --quiet otad.service || fail "the package started otad.service"
fi
# The shipped config names what must be edited before the daemon can run.
if check=$(otad config check 2>&1); then fail "otad config check passed on the shipped config: $check"; else code=$?; fi
echo "$check"
[ "$code" = 2 ] || fail "otad config check: exit $code, want 2"
for key in compatible slots.A slots.B trust.keys_dir; do
	grep -q "^/etc/otad/otad.toml: $key: " <<<"$check" || fail "otad config check does not name $key"
done
# Lines about other units on this host are not ours.
verify=$(systemd-analyze verify /lib/systemd/system/otad.service 2>&1) || fail "systemd-analyze verify: $verify"
if grep otad.service <<<"$verify"; then fail "systemd-analyze verify: $verify"; fi

step "make deb from a release tarball (no .git: the VERSION file)"
mkdir "$tmp/src"
git archive --format=tar HEAD | tar -x -C "$tmp/src"
tarball=$(cat "$tmp/src/VERSION")
make -s -C "$tmp/src" deb ARCHS=amd64
deb=$tmp/src/dist/otad_"$tarball"_amd64.deb
[ -f "$deb" ] || fail "tarball build: no $deb: $(ls "$tmp/src/dist")"
[ "$(dpkg-deb -f "$deb" Version)" = "$tarball" ] || fail "tarball build: package version $(dpkg-deb -f "$deb" Version), want $tarball"
dpkg-deb -x "$deb" "$tmp/src/root"
[ "$("$tmp/src/root/usr/bin/otad" --version)" = "otad $tarball" ] || fail "tarball build: otad --version: $("$tmp/src/root/usr/bin/otad" --version)"
out=$(make -s -C "$tmp/src" version VERSION=9.9.9)
[ "$out" = 9.9.9 ] || fail "make version VERSION=9.9.9 says $out"

step "dpkg -i again (the upgrade path of the maintainer scripts)"
dpkg -i dist/otad_*_amd64.deb
[ ! -e /etc/systemd/system/multi-user.target.wants/otad.service ] || fail "the upgrade enabled otad.service"

step "dpkg -r keeps the state, dpkg -P removes it"
echo journal >/var/lib/otad/ci-marker
dpkg -r otad
[ ! -e /usr/bin/otad ] || fail "/usr/bin/otad left after dpkg -r"
[ -f /var/lib/otad/ci-marker ] || fail "dpkg -r removed the state directory"
[ -f /etc/otad/otad.toml ] || fail "dpkg -r removed the conffile"
dpkg -P otad
[ ! -e /var/lib/otad ] || fail "dpkg -P left /var/lib/otad"
[ ! -e /etc/otad/otad.toml ] || fail "dpkg -P left /etc/otad/otad.toml"

# One sim device per architecture: two slot files, the sim bootloader, a
# key, an image signed with the host's otactl and fetched from a file: URL.
otactl=bin/amd64/otactl
for arch in arm64 armhf; do
	step "$arch under qemu-user-static"
	case $arch in
	arm64) qemu=qemu-aarch64-static ;;
	armhf) qemu=qemu-arm-static ;;
	esac
	root=$tmp/$arch-root d=$tmp/$arch-dev
	dpkg-deb -x dist/otad_*_"$arch".deb "$root"
	file "$root/usr/bin/otad" | grep -q 'statically linked' || fail "$arch otad is not static: $(file "$root/usr/bin/otad")"
	out=$("$qemu" "$root/usr/bin/otad" version)
	[ "$out" = "$want" ] || fail "$arch otad version: $out, want $want"
	"$qemu" "$root/usr/bin/otactl" help >/dev/null || fail "$arch otactl help"

	mkdir -p "$d/keys"
	(cd "$d" && "$OLDPWD/$otactl" keygen release >/dev/null)
	mv "$d/release.pub" "$d/keys/"
	head -c 1048576 /dev/urandom >"$d/image"
	head -c 2097152 /dev/urandom >"$d/slotA"
	truncate -s 2M "$d/slotB"
	"$otactl" sign --key "$d/release.key" --image "$d/image" --version 2.0 \
		--compatible "acme,sim-$arch" --url "file://$d/image" >"$d/offer.json"
	cat >"$d/otad.toml" <<-TOML
		device_id = "sim-$arch"
		compatible = "acme,sim-$arch"
		state_dir = "$d/state"
		control_socket = "$d/otad.sock"
		[trust]
		keys_dir = "$d/keys"
		[slots]
		A = "$d/slotA"
		B = "$d/slotB"
		[bootloader]
		type = "sim"
		env_file = "$d/bootenv"
		[download]
		schemes = ["file"]
		[reboot]
		policy = "manual"
	TOML
	"$qemu" "$root/usr/bin/otad" config check -c "$d/otad.toml" >/dev/null || fail "$arch otad config check of the sim device"
	out=$("$qemu" "$root/usr/bin/otad" install -c "$d/otad.toml" "$d/offer.json" 2>"$d/log") ||
		fail "$arch otad install: exit $?: $out $(cat "$d/log")"
	echo "$out"
	grep -q ": staged " <<<"$out" || fail "$arch otad install did not end staged: $out"
	st=$("$qemu" "$root/usr/bin/otad" status -c "$d/otad.toml")
	echo "$st"
	grep -Eq '^slot B: +2\.0 +staged ' <<<"$st" || fail "$arch otad status: slot B is not staged"
	cmp -n 1048576 "$d/image" "$d/slotB" || fail "$arch: slot B does not hold the image"
done

step "ok"
