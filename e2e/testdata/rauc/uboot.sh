# RAUC's example U-Boot script, contrib/uboot.sh of https://github.com/rauc/rauc
# at 3991031a43f244669889e81f5db18ce56e890b68, Copyright (C) 2015-2026 RAUC
# project, LGPL-2.1-or-later (COPYING). Adapted for otad's e2e suite only in how
# it loads and boots a kernel (the two load_kernel lines and the last line):
# the kernel and initramfs come from partition 2 (A) or 3 (B) of virtio 0 and
# boot with booti and U-Boot's own device tree. See README.md.
# This is only an example to show a possible bootcmd script to implement A/B
# slot selection for kernel on NAND and rootfs on eMMC. It's expected that
# you'll have to adjust it for your use-case.

test -n "${BOOT_ORDER}" || setenv BOOT_ORDER "A B"
test -n "${BOOT_A_LEFT}" || setenv BOOT_A_LEFT 3
test -n "${BOOT_B_LEFT}" || setenv BOOT_B_LEFT 3

setenv bootargs
for BOOT_SLOT in "${BOOT_ORDER}"; do
  if test "x${bootargs}" != "x"; then
    # skip remaining slots
  elif test "x${BOOT_SLOT}" = "xA"; then
    if test 0x${BOOT_A_LEFT} -gt 0; then
      echo "Found valid slot A, ${BOOT_A_LEFT} attempts remaining"
      setexpr BOOT_A_LEFT ${BOOT_A_LEFT} - 1
      setenv load_kernel "load virtio 0:2 ${kernel_addr_r} /boot/Image; load virtio 0:2 ${ramdisk_addr_r} /boot/initrd.img"
      setenv bootargs "${default_bootargs} root=/dev/mmcblk0p1 rauc.slot=A"
    fi
  elif test "x${BOOT_SLOT}" = "xB"; then
    if test 0x${BOOT_B_LEFT} -gt 0; then
      echo "Found valid slot B, ${BOOT_B_LEFT} attempts remaining"
      setexpr BOOT_B_LEFT ${BOOT_B_LEFT} - 1
      setenv load_kernel "load virtio 0:3 ${kernel_addr_r} /boot/Image; load virtio 0:3 ${ramdisk_addr_r} /boot/initrd.img"
      setenv bootargs "${default_bootargs} root=/dev/mmcblk0p2 rauc.slot=B"
    fi
  fi
done

if test -n "${bootargs}"; then
  saveenv
else
  echo "No valid slot found, resetting tries to 3"
  setenv BOOT_A_LEFT 3
  setenv BOOT_B_LEFT 3
  saveenv
  reset
fi

echo "Loading kernel"
run load_kernel
echo " Starting kernel"
booti ${kernel_addr_r} ${ramdisk_addr_r}:${filesize} ${fdtcontroladdr}
