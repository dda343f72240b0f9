SUMMARY = "A/B over-the-air update agent for embedded Linux devices"
DESCRIPTION = "otad installs signed OS images into the inactive slot of an A/B \
partitioned device, switches the bootloader (U-Boot or GRUB, with \
RAUC-compatible variables) to it, and commits the new slot after a health \
check or rolls back."
SECTION = "admin"

require otad-source.inc

SRC_URI = "${OTAD_GIT_URI};destsuffix=${GO_SRCURI_DESTSUFFIX}"
# Every Go module as a gomod:// source (go-mod-update-modules writes it).
require otad-go-mods.inc

GO_IMPORT = "github.com/otad/otad"
# The daemon (otactl and otasim are the workstation's, the otactl .deb), and
# packaging/gendocs, whose modules the man page and completions need: listed
# here so that do_update_modules fetches them too; only otad is installed.
GO_INSTALL = "${GO_IMPORT}/cmd/otad ${GO_IMPORT}/packaging/gendocs"
# The version otad prints (docs/contract/packaging.md): the VERSION file's
# and SRCREV's, as packaging/version gives it for a build of one commit
# (-commit: 0.1.0~dev+gd4fcd5d9ea5f; whatever tags the fetch brought), run
# on the build host by do_compile:prepend into the shell variable
# OTAD_BUILD_VERSION, which go_do_compile's -ldflags and gendocs read.
GO_EXTRA_LDFLAGS = "-X main.version=$OTAD_BUILD_VERSION"

inherit go-mod go-mod-update-modules systemd bash-completion features_check useradd

# The unit is Type=notify and the health check asks systemd whether the
# system is up.
REQUIRED_DISTRO_FEATURES = "systemd"

OTAD_SRC = "${S}/src/${GO_IMPORT}"
OTAD_LICENSE_FILE = "src/${GO_IMPORT}/packaging/debian/copyright"

# The board's config replaces the shipped one (whose compatible string and
# slots are empty, so otad refuses to start on it): in a bbappend,
#   SRC_URI += "file://otad.toml"
#   OTAD_CONFIG = "${UNPACKDIR}/otad.toml"
OTAD_CONFIG ?= "${OTAD_SRC}/packaging/otad.toml"

do_compile:prepend() {
	OTAD_BUILD_VERSION=$(cd ${OTAD_SRC} && GOOS=${BUILD_GOOS} GOARCH=${BUILD_GOARCH} GOARM= GO386= GOMIPS= CGO_ENABLED=0 \
		${GO} run -modcacherw ./packaging/version -commit ${SRCREV})
}

# The man page and the completions come from the command tables, as
# `make deb` makes them (packaging/gendocs): built for the build host and run
# there.
do_compile:append() {
	GOOS=${BUILD_GOOS} GOARCH=${BUILD_GOARCH} GOARM= GO386= GOMIPS= CGO_ENABLED=0 \
		${GO} build -modcacherw -trimpath -o ${B}/gendocs ${GO_IMPORT}/packaging/gendocs
	${B}/gendocs -out ${B}/docs -version "$OTAD_BUILD_VERSION"
}

# The same files, modes and places as the otad .deb (packaging/otad.yaml;
# integrations/integrations_test.go holds the two lists together). The
# source under ${libdir}/go that go.bbclass would install is left out.
do_install() {
	install -D -m 0755 ${B}/${GO_BUILD_BINDIR}/otad ${D}${bindir}/otad
	install -D -m 0644 ${OTAD_SRC}/packaging/otad.service ${D}${systemd_system_unitdir}/otad.service
	install -D -m 0644 ${OTAD_CONFIG} ${D}${sysconfdir}/otad/otad.toml
	install -d -m 0755 ${D}${sysconfdir}/otad/keys.d
	install -D -m 0755 ${OTAD_SRC}/packaging/health-check ${D}${libexecdir}/otad/health-check
	install -D -m 0644 ${OTAD_SRC}/packaging/dbus/io.github.otad.Agent1.conf ${D}${datadir}/dbus-1/system.d/io.github.otad.Agent1.conf
	install -D -m 0644 ${B}/docs/bash/otad ${D}${datadir}/bash-completion/completions/otad
	install -D -m 0644 ${B}/docs/zsh/_otad ${D}${datadir}/zsh/vendor-completions/_otad
	install -D -m 0644 ${B}/docs/fish/otad.fish ${D}${datadir}/fish/vendor_completions.d/otad.fish
	install -D -m 0644 ${B}/docs/man/otad.8 ${D}${mandir}/man8/otad.8
	install -D -m 0644 ${OTAD_SRC}/packaging/bootloader/README.md ${D}${docdir}/otad/bootloader/README.md
	install -D -m 0644 ${OTAD_SRC}/packaging/bootloader/boot.cmd ${D}${docdir}/otad/bootloader/boot.cmd
	install -D -m 0644 ${OTAD_SRC}/packaging/bootloader/grub.cfg ${D}${docdir}/otad/bootloader/grub.cfg
}

# The group the D-Bus policy lets call otad (a device UI's user joins it),
# as the .deb's postinst creates it.
USERADD_PACKAGES = "${PN}"
GROUPADD_PARAM:${PN} = "--system otad"

CONFFILES:${PN} = "${sysconfdir}/otad/otad.toml"

# Not enabled by default, as the .deb does not: the shipped config names no
# board. A bbappend that installs the board's config sets it to "enable".
SYSTEMD_SERVICE:${PN} = "otad.service"
SYSTEMD_AUTO_ENABLE:${PN} ?= "disable"

PACKAGES =+ "${PN}-zsh-completion ${PN}-fish-completion"
FILES:${PN} += "${libexecdir}/otad ${datadir}/dbus-1"
FILES:${PN}-zsh-completion = "${datadir}/zsh"
FILES:${PN}-fish-completion = "${datadir}/fish"
RDEPENDS:${PN}-zsh-completion = "${PN}"
RDEPENDS:${PN}-fish-completion = "${PN}"
