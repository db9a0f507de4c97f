#!/bin/sh
# PID 1 of flotilla's test VM (started by the initramfs): what the qemu provider hands in on
# the kernel command line becomes the VM's network, name and authorized key, then sshd runs
# in the foreground.
#
#   flotilla.authorized_key=<base64 of an authorized_keys line>
#   flotilla.hostname=<instance id>
#   flotilla.max_lifetime=<seconds>   power off after that long (a failsafe for tests)
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
# The unified cgroup hierarchy (v2), where systemd would put it: the cgroup level's slots and
# their limits go below it.
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /run/sshd
arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^flotilla\.$1=//p" | tail -n 1; }
for m in failover net_failover virtio_net; do modprobe "$m" 2>/dev/null; done
name="$(arg hostname)"
hostname "${name:-flotilla-vm}"
ip link set lo up
# QEMU's user-mode network: the guest is 10.0.2.15, the gateway 10.0.2.2, DNS 10.0.2.3.
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
echo 'nameserver 10.0.2.3' >/etc/resolv.conf
ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key </dev/null >/dev/null
key="$(arg authorized_key)"
if [ -n "$key" ]; then
  mkdir -p /root/.ssh && chmod 0700 /root/.ssh
  printf '%s' "$key" | base64 -d >/root/.ssh/authorized_keys
  echo >>/root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
lifetime="$(arg max_lifetime)"
if [ -n "$lifetime" ] && [ "$lifetime" -gt 0 ] 2>/dev/null; then
  (sleep "$lifetime"; echo "flotilla-vm: max_lifetime reached, powering off" >/dev/console; busybox poweroff -f) &
fi
echo "flotilla-vm: sshd starting" >/dev/console
exec /usr/sbin/sshd -D -e
