#!/bin/busybox sh
# /init of the test VM's initramfs: load the virtio modules the cloud kernel keeps as modules,
# mount the root disk (/dev/vda, ext4 is built in) and hand over to its init.
/bin/busybox mkdir -p /proc /sys /dev /newroot
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
for m in $(/bin/busybox cat /modules/order); do
  /bin/busybox insmod "/modules/$m" 2>/dev/null
done
i=0
while [ ! -b /dev/vda ]; do
  i=$((i + 1))
  [ "$i" -gt 500 ] && { echo "flotilla-vm: no /dev/vda" >/dev/console; /bin/busybox poweroff -f; }
  /bin/busybox usleep 20000
done
/bin/busybox mount -t ext4 -o rw,noatime /dev/vda /newroot || /bin/busybox poweroff -f
/bin/busybox mount --move /dev /newroot/dev
/bin/busybox umount /proc /sys
exec /bin/busybox switch_root /newroot /usr/local/sbin/flotilla-vm-init
