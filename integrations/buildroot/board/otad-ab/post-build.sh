#!/bin/sh
# Mounts the data partition genimage.cfg makes at /var/lib/otad. The line is
# in the root file system itself, so slot B and every update image built
# from this configuration carry it too.
set -e

TARGET_DIR="$1"
LINE="LABEL=otad-data	/var/lib/otad	ext4	defaults,nodev,nosuid,noexec	0	2"

mkdir -p "${TARGET_DIR}/var/lib/otad"
grep -q '[[:space:]]/var/lib/otad[[:space:]]' "${TARGET_DIR}/etc/fstab" ||
	echo "${LINE}" >>"${TARGET_DIR}/etc/fstab"
