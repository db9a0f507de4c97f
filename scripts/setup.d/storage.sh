#!/usr/bin/env bash
# The judges of the distributed cache's Google Cloud Storage store (issue 32): Google's
# gcp-storage-emulator (the bucket the tests write to) and google-cloud-storage, Google's own
# client library (it makes the V2 signed URLs flotilla's are compared with and reads back what
# flotilla wrote). Installed from PyPI into a venv of its own (a Debian Python forbids
# system-wide pip, PEP 668). Idempotent.
#
# The tests find it at $FLOTILLA_GCS_EMULATOR, else
# /opt/flotilla/storage-venv/bin/gcp-storage-emulator.
set -euo pipefail

log() { printf '[setup storage] %s\n' "$*" >&2; }

VENV="${FLOTILLA_STORAGE_VENV:-/opt/flotilla/storage-venv}"
SPEC=('gcp-storage-emulator>=2024.8,<2026' 'google-cloud-storage>=2.18,<4' 'cryptography>=42')

if [ -x "$VENV/bin/gcp-storage-emulator" ] \
  && "$VENV/bin/python" -c 'import gcp_storage_emulator, google.cloud.storage, cryptography' 2>/dev/null; then
  log "gcp-storage-emulator and google-cloud-storage present in $VENV"
  exit 0
fi

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  log "installing python3-venv"
  export DEBIAN_FRONTEND=noninteractive
  ${SUDO:-} apt-get update -qq
  ${SUDO:-} apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

log "installing ${SPEC[*]} into $VENV"
${SUDO:-} mkdir -p "$(dirname "$VENV")"
${SUDO:-} python3 -m venv "$VENV"
${SUDO:-} "$VENV/bin/pip" install --quiet --disable-pip-version-check "${SPEC[@]}"
log "gcp-storage-emulator at $VENV/bin/gcp-storage-emulator"
