SUMMARY = "An example A/B image with otad"
DESCRIPTION = "core-image-minimal with otad, written as a wic disk image: a \
boot partition with otad's U-Boot boot script, slots A and B, and a data \
partition for /var/lib/otad (otad-ab-uboot.wks.in). Its rootfs.ext4 is \
what otactl sign takes as an update."

require recipes-core/images/core-image-minimal.bb

# The kernel goes into each slot's /boot, where boot.cmd loads it (an arm64
# machine's KERNEL_IMAGETYPE is Image, as booti wants).
IMAGE_INSTALL:append = " otad kernel-image kernel-devicetree"

IMAGE_FSTYPES:append = " ext4 wic"
WKS_FILE = "otad-ab-uboot.wks.in"
WKS_FILE_DEPENDS:append = " otad-boot-script"
do_image_wic[depends] += "otad-boot-script:do_deploy"
IMAGE_BOOT_FILES:append = " boot.scr"

# Each slot's size (otad-ab-uboot.wks.in, expanded by bitbake): partitions 2
# and 3, and the most an update image may grow to.
OTAD_SLOT_SIZE ?= "1024M"

# The data partition's mount is in the root file system itself, so slot B
# and every update built from this image carry it (wic would add it to
# slot A's copy only).
otad_fstab() {
	install -d -m 0700 ${IMAGE_ROOTFS}/var/lib/otad
	printf 'LABEL=otad-data\t/var/lib/otad\text4\tdefaults,nodev,nosuid,noexec\t0\t2\n' >> ${IMAGE_ROOTFS}${sysconfdir}/fstab
}
ROOTFS_POSTPROCESS_COMMAND += "otad_fstab"
