#!/usr/bin/env bash
# CI for the Debian packages (docs/contract/packaging.md, issues 12 and 31):
# build otad (the device's) and otactl (the workstation's) for amd64, arm64
# and armhf; check each carries its role's files and not the other's;
# lintian (no errors; a warning must be explained in packaging/README.md);
# install the amd64 ones on this machine and check them (man pages,
# completions, links of the shipped docs), then remove (state kept) and purge
# (state gone); run the arm64 and armhf binaries under qemu-user-static, down
# to a sim-device install ending staged.
# Needs root and scripts/deps/apt.txt installed. Leaves nothing installed.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n== ci-deb: %s\n' "$*"; }
fail() { echo "ci-deb: FAIL: $*" >&2; exit 1; }

for p in otad otactl; do
	if dpkg-query -W -f '${Status}' $p 2>/dev/null | grep -q installed; then
		fail "$p is already installed on this machine; this check would remove it"
	fi
done
tmp=$(mktemp -d)
trap 'dpkg -P otad otactl >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

step "make deb"
rm -rf dist
make -s deb
ls -l dist/
# One version: the package's, and what each binary says (packaging/version).
version=$(make -s version)
want="otad $version"
for arch in amd64 arm64 armhf; do
	for p in otad otactl; do
		deb=dist/${p}_${version}_$arch.deb
		[ -f "$deb" ] || fail "no package ${p}_${version}_$arch.deb in dist/"
		[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "$arch $p package version is not $version"
	done
	# By role: the device's package carries no operator tool, the
	# workstation's no daemon, unit or device config.
	dpkg-deb -c dist/otad_"$version"_"$arch".deb >"$tmp/otad.list"
	dpkg-deb -c dist/otactl_"$version"_"$arch".deb >"$tmp/otactl.list"
	! grep -E '/usr/bin/ot(actl|asim)$' "$tmp/otad.list" || fail "$arch otad package carries an operator tool"
	! grep -E '/usr/bin/otad$|systemd/system/|/etc/otad' "$tmp/otactl.list" || fail "$arch otactl package carries the daemon, its unit or its config"
	for f in usr/bin/otad lib/systemd/system/otad.service usr/share/man/man8/otad.8.gz usr/share/bash-completion/completions/otad \
		usr/share/zsh/vendor-completions/_otad usr/share/fish/vendor_completions.d/otad.fish usr/share/dbus-1/system.d/io.github.otad.Agent1.conf; do
		grep -q " \./$f\$" "$tmp/otad.list" || fail "$arch otad package lacks /$f"
	done
	for f in usr/bin/otactl usr/bin/otasim usr/share/man/man1/otactl.1.gz usr/share/man/man1/otasim.1.gz usr/share/bash-completion/completions/otactl \
		usr/share/zsh/vendor-completions/_otactl usr/share/fish/vendor_completions.d/otactl.fish; do
		grep -q " \./$f\$" "$tmp/otactl.list" || fail "$arch otactl package lacks /$f"
	done
done
du -b dist/*_amd64.deb
for p in otad otactl; do echo "$p installed size: $(dpkg-deb -f dist/${p}_"$version"_amd64.deb Installed-Size) KiB"; done
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
! command -v otactl || fail "the otad package installed otactl"
dpkg -i dist/otactl_*_amd64.deb
[ "$(otad version)" = "$want" ] || fail "otad version: $(otad version), want $want"
[ "$(otad --version)" = "$want" ] || fail "otad --version: $(otad --version), want $want"
[ "$(otactl --version)" = "otactl $version" ] || fail "otactl --version: $(otactl --version), want otactl $version"
[ "$(dpkg-query -W -f '${Version}' otad)" = "$version" ] || fail "installed version $(dpkg-query -W -f '${Version}' otad), want $version"
otactl help >/dev/null || fail "otactl help"
[ "$(stat -c %a /var/lib/otad)" = 700 ] || fail "/var/lib/otad: mode $(stat -c %a /var/lib/otad), want 700"
grep -qx /etc/otad/otad.toml /var/lib/dpkg/info/otad.conffiles || fail "otad.toml is not a conffile"
[ -d /etc/otad/keys.d ] && [ -x /usr/libexec/otad/health-check ] || fail "keys.d or the health check missing"
# D-Bus: the policy where the system bus reads it, and its group.
[ -f /usr/share/dbus-1/system.d/io.github.otad.Agent1.conf ] || fail "the D-Bus policy is missing"
getent group otad >/dev/null || fail "the postinst made no group otad (the D-Bus policy's)"
[ -f /usr/share/bash-completion/completions/otad ] && [ -f /usr/share/bash-completion/completions/otactl ] || fail "bash completion missing"
# The installed man pages name what the installed help lists.
for c in $(otactl help | awk '/^  [a-z]/ {print $1}' | sort -u); do
	man -P cat otactl 2>/dev/null | grep -q "otactl $c" || fail "man otactl does not name $c"
done
for c in $(otad help | awk '/^  [a-z]/ {print $1}' | sort -u); do
	man -P cat 8 otad 2>/dev/null | grep -q "otad $c" || fail "man otad does not name $c"
done
# The installed completions are what the installed programs print.
for p in otad otactl; do
	for sh in bash zsh fish; do "$p" completion "$sh" >"$tmp/$p.$sh"; done
	cmp "$tmp/$p.bash" /usr/share/bash-completion/completions/$p || fail "$p: installed bash completion differs from $p completion bash"
	cmp "$tmp/$p.zsh" /usr/share/zsh/vendor-completions/_$p || fail "$p: installed zsh completion differs from $p completion zsh"
	cmp "$tmp/$p.fish" /usr/share/fish/vendor_completions.d/$p.fish || fail "$p: installed fish completion differs from $p completion fish"
done
# Every relative link of the installed docs resolves.
for page in $(find /usr/share/doc/otad /usr/share/doc/otactl -name '*.md'); do
	for target in $(grep -oE '\]\([^)# ]*' "$page" | sed 's/^](//' | sort -u); do
		case $target in *:*) continue ;; esac # a URL
		[ -z "$target" ] || [ -e "$(dirname "$page")/$target" ] || fail "$page: broken link $target"
	done
done
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
dpkg -r otactl
[ ! -e /usr/bin/otactl ] && [ -x /usr/bin/otad ] || fail "dpkg -r otactl: otactl left or otad gone"
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
	dpkg-deb -x dist/otactl_*_"$arch".deb "$root"
	"$qemu" "$root/usr/bin/otactl" help >/dev/null || fail "$arch otactl help"
	"$qemu" "$root/usr/bin/otasim" help >/dev/null || fail "$arch otasim help"

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
