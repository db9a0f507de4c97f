#!/usr/bin/env bash
# Builds flotilla's test images offline (no registry pulls) and prints their references.
#
#   scripts/build-images.sh busybox    -> local/flotilla-busybox:<hash>   tiny job image
#   scripts/build-images.sh instance   -> local/flotilla-instance:<hash>  "VM-like" instance:
#                                         sshd + dockerd + git, reached only over SSH
#
# The tag is a hash of the recipe (this script and scripts/images/*), so a changed recipe
# builds a new image and an unchanged one is reused. Needs root, docker, busybox-static and
# debootstrap (scripts/setup.sh installs them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
what="${1:-}"
recipe_hash="$(cat "$here/build-images.sh" "$here"/images/* | sha256sum | cut -c1-12)"
log() { printf '[build-images] %s\n' "$*" >&2; }

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

build_busybox() {
  local ref="local/flotilla-busybox:$recipe_hash"
  if ! image_exists "$ref"; then
    log "building $ref"
    local root; root="$(mktemp -d)"
    mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/root"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $("$root/bin/busybox" --list); do
      [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
    done
    chmod 1777 "$root/tmp"
    echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
    echo 'root:x:0:' >"$root/etc/group"
    tar -C "$root" -c . | docker import --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' - "$ref" >/dev/null
    rm -rf "$root"
  fi
  echo "$ref"
}

build_instance() {
  local ref="local/flotilla-instance:$recipe_hash"
  if ! image_exists "$ref"; then
    local busybox; busybox="$(build_busybox)"
    log "building $ref (debootstrap, a few minutes)"
    local root; root="$(mktemp -d)"
    debootstrap --variant=minbase \
      --include=openssh-server,docker.io,git,curl,ca-certificates,iproute2,procps,zip,unzip \
      bookworm "$root" http://deb.debian.org/debian >/tmp/flotilla-debootstrap.log 2>&1 \
      || { tail -n 40 /tmp/flotilla-debootstrap.log >&2; exit 1; }
    # Host keys are made per instance at start (pinning must see a different key per instance).
    rm -f "$root"/etc/ssh/ssh_host_*
    install -m 0755 "$here/images/instance-init.sh" "$root/usr/local/sbin/flotilla-instance-init"
    install -m 0644 "$here/images/sshd_config" "$root/etc/ssh/sshd_config"
    mkdir -p "$root/run/sshd" "$root/root/.ssh" "$root/opt/flotilla/preload"
    chmod 0700 "$root/root/.ssh"
    # Job images for the inner dockerd: no registry is reachable, so they travel with the instance.
    docker save "$busybox" -o "$root/opt/flotilla/preload/busybox.tar"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | docker import \
      --change 'CMD ["/usr/local/sbin/flotilla-instance-init"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      - "$ref" >/dev/null
    rm -rf "$root"
  fi
  echo "$ref"
}

case "$what" in
  busybox) build_busybox ;;
  instance) build_instance ;;
  *) echo "usage: $0 busybox|instance" >&2; exit 2 ;;
esac
