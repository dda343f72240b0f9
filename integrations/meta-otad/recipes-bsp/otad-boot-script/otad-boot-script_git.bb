SUMMARY = "otad's A/B boot script for U-Boot (boot.scr)"
DESCRIPTION = "packaging/bootloader/boot.cmd of the otad repository, compiled \
with mkimage and deployed for the image's boot partition: it walks \
BOOT_ORDER and the BOOT_x_LEFT counters (RAUC's variables) that otad sets."
SECTION = "bootloaders"

require recipes-core/otad/otad-source.inc

SRC_URI = "${OTAD_GIT_URI};destsuffix=otad"
S = "${UNPACKDIR}/otad"
OTAD_LICENSE_FILE = "packaging/debian/copyright"

DEPENDS = "u-boot-tools-native"

inherit deploy nopackages

# mkimage's name for the machine's architecture, as u-boot.inc finds it.
UBOOT_ARCH = "${@oe.kernel.map_uboot_arch(d)}"
B = "${WORKDIR}/build"

do_configure[noexec] = "1"

do_compile() {
	uboot-mkimage -A ${UBOOT_ARCH} -T script -C none \
		-d ${S}/packaging/bootloader/boot.cmd ${B}/boot.scr
}

do_deploy() {
	install -D -m 0644 ${B}/boot.scr ${DEPLOYDIR}/boot.scr
}
addtask deploy after do_compile before do_build

PACKAGE_ARCH = "${MACHINE_ARCH}"
