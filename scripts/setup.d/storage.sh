#!/usr/bin/env bash
# The judges of the distributed cache's Google Cloud Storage and Azure stores (issue 32):
# Google's gcp-storage-emulator and google-cloud-storage (Google's client library: it makes the
# V2 signed URLs flotilla's are compared with and reads back what flotilla wrote), Microsoft's
# Azurite (from npm; it checks every SAS signature) and azure-storage-blob (Azure's client
# library, which reads back what flotilla wrote). The Python ones go into a venv of their own
# (a Debian Python forbids system-wide pip, PEP 668). Idempotent.
#
# The tests find them at $FLOTILLA_GCS_EMULATOR, else
# /opt/flotilla/storage-venv/bin/gcp-storage-emulator, and $FLOTILLA_AZURITE, else
# /opt/flotilla/azurite/node_modules/.bin/azurite-blob.
set -euo pipefail

log() { printf '[setup storage] %s\n' "$*" >&2; }

VENV="${FLOTILLA_STORAGE_VENV:-/opt/flotilla/storage-venv}"
SPEC=('gcp-storage-emulator>=2024.8,<2026' 'google-cloud-storage>=2.18,<4' 'cryptography>=42'
  'azure-storage-blob>=12.20,<13')
AZURITE_DIR="${FLOTILLA_AZURITE_DIR:-/opt/flotilla/azurite}"
AZURITE_VERSION=3.37.0

if [ ! -x "$AZURITE_DIR/node_modules/.bin/azurite-blob" ]; then
  log "installing azurite $AZURITE_VERSION into $AZURITE_DIR"
  ${SUDO:-} mkdir -p "$AZURITE_DIR"
  ${SUDO:-} npm install --silent --no-audit --no-fund --prefix "$AZURITE_DIR" "azurite@$AZURITE_VERSION"
fi

if [ -x "$VENV/bin/gcp-storage-emulator" ] \
  && "$VENV/bin/python" -c 'import gcp_storage_emulator, google.cloud.storage, cryptography, azure.storage.blob' 2>/dev/null; then
  log "the storage judges are present in $VENV and $AZURITE_DIR"
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
