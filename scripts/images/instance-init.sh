#!/bin/sh
# PID 1 of a flotilla test instance: a per-instance host key, the authorized key handed in
# by the provider, optionally an inner dockerd, then sshd in the foreground.
set -eu
ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key </dev/null >/dev/null
if [ -n "${FLOTILLA_AUTHORIZED_KEY:-}" ]; then
  printf '%s\n' "$FLOTILLA_AUTHORIZED_KEY" >/root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
unset FLOTILLA_AUTHORIZED_KEY
if [ "${FLOTILLA_INNER_DOCKERD:-0}" = "1" ]; then
  (
    dockerd --host unix:///var/run/docker.sock >/var/log/dockerd.log 2>&1 &
    for _ in $(seq 1 120); do docker version >/dev/null 2>&1 && break; sleep 0.5; done
    for t in /opt/flotilla/preload/*.tar; do [ -f "$t" ] && docker load -i "$t" >/dev/null 2>&1; done
    touch /run/flotilla-dockerd-ready
  ) &
fi
exec /usr/sbin/sshd -D -e
