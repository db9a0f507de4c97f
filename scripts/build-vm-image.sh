#!/usr/bin/env bash
# Builds the qemu provider's test VM image offline and prints the directory holding it:
#
#   scripts/build-vm-image.sh  ->  /var/cache/flotilla/vm/<hash>/{disk.img,vmlinuz,initrd.img}
#
# - disk.img: a sparse 2 GiB ext4 root file system (raw): Debian 12 minbase with openssh-server,
#   git, tar and iproute2; its PID 1 is scripts/vm-image/init.sh, which takes the authorized key,
#   host name and a power-off deadline from the kernel command line and runs sshd.
# - vmlinuz: this machine's Debian cloud kernel (linux-image-cloud-amd64), booted directly.
# - initrd.img: a busybox initramfs (~1 MB) that loads the virtio modules that kernel keeps as
#   modules and mounts /dev/vda.
#
# The directory is named after a hash of the recipe (this script, scripts/vm-image/*, the
# sshd configuration and the kernel's version), so an unchanged recipe is reused and a changed
# one builds a new image. It is a separate script from build-images.sh, whose Docker image tags
# hash build-images.sh itself: adding the VM there would rebuild every Docker image.
# Needs root, debootstrap, busybox-static and the cloud kernel (scripts/setup.sh installs them);
# debootstrap fetches Debian packages, nothing else is downloaded. Set FLOTILLA_VM_IMAGE_DIR to
# build elsewhere than /var/cache/flotilla/vm.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { printf '[build-vm-image] %s\n' "$*" >&2; }

kernel="$(ls /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n 1 || true)"
[ -n "$kernel" ] || { log "no /boot/vmlinuz-*-cloud-amd64: install linux-image-cloud-amd64"; exit 1; }
kver="${kernel#/boot/vmlinuz-}"
[ -d "/lib/modules/$kver" ] || { log "no /lib/modules/$kver for $kernel"; exit 1; }
[ -x /bin/busybox ] || { log "no /bin/busybox: install busybox-static"; exit 1; }

recipe_hash="$( { cat "$here/build-vm-image.sh" "$here"/vm-image/* "$here/images/sshd_config"; echo "$kver"; } | sha256sum | cut -c1-12)"
base="${FLOTILLA_VM_IMAGE_DIR:-/var/cache/flotilla/vm}"
out="$base/$recipe_hash"
mkdir -p "$base"

# One build at a time: test processes may ask for the image at once.
exec 9>"$base/.lock"
flock 9
if [ -f "$out/disk.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
  echo "$out"
  exit 0
fi

log "building $out (debootstrap, about two minutes)"
work="$(mktemp -d "$base/.build-XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"
debootstrap --variant=minbase --include=openssh-server,git,ca-certificates,iproute2,procps,kmod \
  bookworm "$root" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
  || { tail -n 40 "$work/debootstrap.log" >&2; exit 1; }

# The guest's init and sshd; host keys are made at each boot (each VM has its own).
rm -f "$root"/etc/ssh/ssh_host_*
install -m 0755 "$here/vm-image/init.sh" "$root/usr/local/sbin/flotilla-vm-init"
install -m 0644 "$here/images/sshd_config" "$root/etc/ssh/sshd_config"
install -m 0755 /bin/busybox "$root/usr/local/bin/busybox"
mkdir -p "$root/builds"

# Modules the root file system loads itself (the network card), with what they depend on.
# (modprobe takes one module per call: the words after it are that module's parameters.)
modules() {
  local m
  for m in "$@"; do
    modprobe --show-depends -S "$kver" "$m" | awk '$1 == "insmod" { print $2 }'
  done
}
for f in $(modules virtio_net); do
  mkdir -p "$root$(dirname "$f")"
  cp "$f" "$root$f"
done
cp "/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$kver/"
depmod -b "$root" "$kver"

# Smaller: no documentation, package caches or lists.
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/* \
  "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log

# The initramfs: busybox, the block and transport modules in load order, and its /init.
ird="$work/initramfs"
mkdir -p "$ird/bin" "$ird/modules"
cp /bin/busybox "$ird/bin/busybox"
install -m 0755 "$here/vm-image/initramfs-init.sh" "$ird/init"
: >"$ird/modules/order"
for f in $(modules virtio_mmio virtio_pci virtio_blk); do
  b="$(basename "$f")"
  if [ ! -e "$ird/modules/$b" ]; then
    cp "$f" "$ird/modules/$b"
    echo "$b" >>"$ird/modules/order"
  fi
done
(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.img"

# The disk: ext4 made straight from the directory (no loop device, no mount).
mke2fs -q -t ext4 -L flotilla-vm -d "$root" -E root_owner=0:0 "$work/disk.img" 2G
cp "$kernel" "$work/vmlinuz"

mkdir -p "$out.tmp"
mv "$work/disk.img" "$work/vmlinuz" "$work/initrd.img" "$out.tmp/"
rm -rf "$out"
mv "$out.tmp" "$out"
log "built $out ($(du -sh "$out/disk.img" | cut -f1) on disk)"
echo "$out"
