#!/usr/bin/env bash
# moto's standalone server, the judge of the aws provider's tests (issue 20): it serves the
# Auto Scaling, EC2 and EC2 Instance Connect APIs on loopback. Installed from PyPI into a venv
# of its own (a Debian Python forbids system-wide pip, PEP 668). Idempotent.
#
# The tests find it at $FLOTILLA_MOTO_SERVER, else /opt/flotilla/moto-venv/bin/moto_server,
# else moto_server on PATH.
set -euo pipefail

log() { printf '[setup aws] %s\n' "$*" >&2; }

VENV="${FLOTILLA_MOTO_VENV:-/opt/flotilla/moto-venv}"
# moto 5 is the major version the tests were written against (its server, its ASG and
# Instance Connect back ends); a later major may change what it serves.
SPEC='moto[server,ec2,autoscaling,s3]>=5.1,<6'

if [ -x "$VENV/bin/moto_server" ] && "$VENV/bin/python" -c 'import moto, flask, boto3, yaml, py_partiql_parser' 2>/dev/null; then
  log "moto present: $("$VENV/bin/python" -c 'import moto; print(moto.__version__)')"
  exit 0
fi

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  log "installing python3-venv"
  export DEBIAN_FRONTEND=noninteractive
  ${SUDO:-} apt-get update -qq
  ${SUDO:-} apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

log "installing $SPEC into $VENV"
${SUDO:-} mkdir -p "$(dirname "$VENV")"
${SUDO:-} python3 -m venv "$VENV"
${SUDO:-} "$VENV/bin/pip" install --quiet --disable-pip-version-check "$SPEC"
log "moto $("$VENV/bin/python" -c 'import moto; print(moto.__version__)') at $VENV/bin/moto_server"
