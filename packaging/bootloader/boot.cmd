# otad A/B boot script for U-Boot (RAUC-compatible variables, docs/contract/bootloaders.md).
# Build: mkimage -A arm64 -T script -C none -d boot.cmd boot.scr
#
# Variables kept in the U-Boot environment (saved with saveenv):
#   BOOT_ORDER   slots in the order to try, e.g. "A B" (unset or empty: "A B")
#   BOOT_A_LEFT  boot attempts left for slot A, in hex as RAUC writes it (unset: 3)
#   BOOT_B_LEFT  boot attempts left for slot B, in hex (unset: 3)
# The default 3 must equal `attempts` in /etc/otad/otad.toml, written in hex
# (attempts = 10 is "a" here): `test 0x${...}` and setexpr both read hex.
#
# Every boot walks BOOT_ORDER and boots the first slot with attempts left, after
# counting one attempt down and saving the env. otad restores the counter once the
# slot passes its health check (mark good), puts a freshly written slot first
# (mark active), and before writing a slot or when rejecting one sets its counter
# to 0 and takes it out of BOOT_ORDER (mark bad), so it is never booted again
# until it is marked active. When no slot in BOOT_ORDER has attempts left, both
# counters are reset and the board resets (RAUC's behaviour).
#
# Where the slots are: partitions 2 (slot A) and 3 (slot B) of the device this
# script was loaded from (distro boot's devtype and devnum; mmc 0 when they are
# unset), each an ext4 root holding /boot/Image, optionally /boot/initrd.img, and
# /boot/${fdtfile} when the board names a device tree file (else U-Boot's own
# device tree, ${fdtcontroladdr}, goes to the kernel). Linux finds its root by
# PARTUUID. Extra kernel arguments come from the env variable otad_bootargs.
# Decision state lives in hush local variables (otad_*) or is set after saveenv,
# so the saved env never holds it.
#
# bootctl's tests (TestBootCmdMatchesPick) run this file's logic under /bin/sh and compare it
# with uboot.Pick: keep to the commands they translate (setenv, setexpr,
# saveenv, reset, test, echo, part uuid, load, booti/bootz/bootm) and one command per line.

test -n "${BOOT_ORDER}" || setenv BOOT_ORDER "A B"
test -n "${BOOT_A_LEFT}" || setenv BOOT_A_LEFT 3
test -n "${BOOT_B_LEFT}" || setenv BOOT_B_LEFT 3

otad_slot=
for BOOT_SLOT in ${BOOT_ORDER}; do
  if test -z "${otad_slot}"; then
    if test "x${BOOT_SLOT}" = "xA"; then
      if test 0x${BOOT_A_LEFT} -gt 0; then
        setexpr BOOT_A_LEFT ${BOOT_A_LEFT} - 1
        echo "otad: slot A, ${BOOT_A_LEFT} attempts left after this one"
        otad_slot=A
        otad_part=2
      else
        echo "otad: slot A has no attempts left"
      fi
    elif test "x${BOOT_SLOT}" = "xB"; then
      if test 0x${BOOT_B_LEFT} -gt 0; then
        setexpr BOOT_B_LEFT ${BOOT_B_LEFT} - 1
        echo "otad: slot B, ${BOOT_B_LEFT} attempts left after this one"
        otad_slot=B
        otad_part=3
      else
        echo "otad: slot B has no attempts left"
      fi
    fi
  fi
done

if test -z "${otad_slot}"; then
  echo "otad: no slot in BOOT_ORDER has attempts left; resetting both counters to 3"
  setenv BOOT_A_LEFT 3
  setenv BOOT_B_LEFT 3
  saveenv
  reset
fi

# Count the attempt before booting, so a kernel that hangs still used it up.
saveenv

if test -z "${devtype}"; then
  devtype=mmc
  devnum=0
fi
part uuid ${devtype} ${devnum}:${otad_part} otad_partuuid
setenv bootargs "${otad_bootargs} root=PARTUUID=${otad_partuuid} rootwait otad.slot=${otad_slot} rauc.slot=${otad_slot}"
load ${devtype} ${devnum}:${otad_part} ${kernel_addr_r} /boot/Image
otad_fdt=${fdtcontroladdr}
if test -n "${fdtfile}"; then
  if load ${devtype} ${devnum}:${otad_part} ${fdt_addr_r} /boot/${fdtfile}; then
    otad_fdt=${fdt_addr_r}
  fi
fi
otad_initrd=-
if load ${devtype} ${devnum}:${otad_part} ${ramdisk_addr_r} /boot/initrd.img; then
  otad_initrd=${ramdisk_addr_r}:${filesize}
fi
booti ${kernel_addr_r} ${otad_initrd} ${otad_fdt}

# Only reached when the slot could not be loaded: the attempt is already counted,
# so resetting tries again and eventually falls back to the other slot.
echo "otad: booting slot ${otad_slot} failed; resetting"
reset
