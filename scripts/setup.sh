#!/usr/bin/env bash
# Installs, on a fresh Debian 12 machine, everything flotilla's test suite needs,
# and starts the Docker engine. Idempotent: safe to run again and again.
#
# Needs root (or passwordless sudo) and access to Debian's package mirror.
set -euo pipefail

log() { printf '[setup] %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    log "must run as root (or with sudo) to install packages"; exit 1
  fi
fi

PACKAGES=(
  docker.io            # the Docker engine (API 1.41 on Debian 12)
  openssh-server       # real sshd for connector tests and inside instance images
  openssh-client       # ssh(1) for the ControlMaster comparison benchmark
  qemu-system-x86      # microVM / VM isolation under TCG
  qemu-utils           # qemu-img: the microvm and vm levels' disk layers
  linux-image-cloud-amd64
  busybox-static       # tiny offline job image and initramfs
  debootstrap          # offline Debian instance image and test VM image
  cpio kmod            # the test VM's initramfs and modules (scripts/build-vm-image.sh)
  git ca-certificates curl iproute2 procps zip unzip
  openssl              # judges the aws provider's Windows password decryption
  e2fsprogs            # mke2fs: the microvm level's root file systems
  prometheus           # promtool: judges the /metrics exposition
  python3-prometheus-client  # a second, independent parser of it
  python3-yaml         # libyaml in C (PyYAML's CParser): judges how flotilla reads YAML
  chromium nodejs npm  # the status page in a real browser (playwright-core from npm)
  zsh fish groff-base  # judge the generated shell completions and man pages
  systemd              # systemd-analyze: judges the unit `flotilla install` writes
  tini                 # tini-static: PID 1 of the manager's image (reaps orphans)
  lintian              # judges the Debian package scripts/build-deb.sh makes
  binutils             # strip: the package's binary, as dh_strip does
  docker-registry apache2-utils  # a registry with htpasswd logins: judges registry credentials
)

# The packages of PACKAGES not installed now.
missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    # A Node.js from elsewhere (NodeSource's nodejs bundles npm and conflicts with Debian's
    # npm package) serves as well as Debian's: asking apt for npm then would fail.
    case "$p" in
      nodejs | npm) command -v "${p/nodejs/node}" >/dev/null 2>&1 && continue ;;
    esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# Twice: installing one package can remove another the machine had (a qemu-utils from
# backports goes when Debian's qemu-system-x86 comes, their versions being tied), so what the
# first pass took away is put back by the second, in versions that fit together.
for pass in 1 2; do
  mapfile -t missing < <(missing_packages)
  if [ ${#missing[@]} -eq 0 ]; then
    [ "$pass" = 1 ] && log "all packages present"
    break
  fi
  log "installing (pass $pass): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  [ "$pass" = 1 ] && $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
done
mapfile -t missing < <(missing_packages)
if [ ${#missing[@]} -gt 0 ]; then
  log "still missing after installing: ${missing[*]}"
  exit 1
fi

# Start dockerd unless something already answers on the socket.
if ! $SUDO docker version >/dev/null 2>&1; then
  log "starting dockerd"
  $SUDO mkdir -p /var/log
  # iptables may be unusable in some sandboxes; the engine still works without it
  # for the loopback-published ports the tests use.
  # In a session of its own: its process group then has a live leader (dockerd itself), so no
  # tool that stops process groups by id can take it for a group whose leader is gone.
  $SUDO sh -c 'nohup setsid dockerd >/var/log/flotilla-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do
    $SUDO docker version >/dev/null 2>&1 && break
    sleep 1
  done
  if ! $SUDO docker version >/dev/null 2>&1; then
    log "dockerd did not come up; last log lines:"
    tail -n 30 /var/log/flotilla-dockerd.log >&2 || true
    exit 1
  fi
fi
log "docker engine: $($SUDO docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"

# The status page test drives Debian's Chromium with playwright-core from npm (pinned by
# testkit/browser/package-lock.json); no browser is downloaded.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -d "$ROOT/testkit/browser/node_modules/playwright-core" ]; then
  log "installing playwright-core for the browser test"
  (cd "$ROOT/testkit/browser" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund)
fi

# What one part of the suite alone needs (a provider's judge: a Go go-plugin peer, kubectl,
# moto) is set up by its own script in scripts/setup.d/, run here in name order with the same
# privileges. Each must be idempotent and log what it installs.
for part in "$ROOT"/scripts/setup.d/*.sh; do
  [ -e "$part" ] || continue
  log "running $(basename "$part")"
  SUDO="$SUDO" bash "$part"
done
