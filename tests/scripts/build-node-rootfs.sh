#!/usr/bin/env bash
# Builds the real node's root file system as an ext4 disk image, offline from Debian
# packages (mmdebstrap, minbase + systemd as PID 1), into a cache outside the repository
# keyed by everything that goes in: Debian's kernel package (its modules), the kubelet,
# the node runtime (build-node-runtime.sh), and this script with tests/node/rootfs.
#
# Inside: systemd, dbus, udev, kmod, iproute2, util-linux (nsenter for the agent's kubelet
# restart command); the kernel's modules (virtio, overlay, bridge, veth: Debian builds them
# as modules); /usr/local/bin/{kubelet,containerd,containerd-shim-runc-v2,ctr,runc};
# /opt/cni/bin/{loopback,bridge,host-local}; the units and configuration in
# tests/node/rootfs (containerd, kubelet, networkd, and nodemem-node-setup, which applies
# the run's files from the 9p share `nodemem` before containerd and the kubelet start).
# Per-run data (node name, certificates, kubelet configuration, images) is not in the
# image: the harness shares it with the VM, so one cached image serves every test.
#
# Beside root.img: initrd-modules/ (the modules the initramfs loads to reach the disk,
# and their order) and kernel-release.
#
# Usage: build-node-rootfs.sh KUBELET RUNTIME_DIR. Prints the image path on stdout (last
# line); progress goes to stderr.
set -euo pipefail

kubelet="${1:?usage: build-node-rootfs.sh KUBELET RUNTIME_DIR}"
runtime="${2:?usage: build-node-rootfs.sh KUBELET RUNTIME_DIR}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
SUITE="${NODEMEM_NODE_SUITE:-bookworm}"

# The kernel package is the one fetch-kernel.sh boots; its modules go into the image.
vmlinuz="$(bash "$repo/tests/scripts/fetch-kernel.sh")"
kernel_dir="$(dirname "$(dirname "$vmlinuz")")"
kernel_pkg="$(basename "$kernel_dir")"   # <package>-<version>

key="$( {
  echo "$SUITE $kernel_pkg"
  sha256sum "$kubelet" | cut -d' ' -f1
  echo "$runtime"
  cat "$0"
  find "$repo/tests/node/rootfs" -type f | sort | xargs cat
} | sha256sum | cut -c1-16)"
out="$CACHE/node-rootfs/$SUITE-$key"
if [[ -f "$out/root.img" ]]; then
  echo "$out/root.img"
  exit 0
fi

for tool in mmdebstrap mke2fs dpkg-deb chroot; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed to build the node's root file system (tests/scripts/install-prereqs.sh installs it)" >&2; exit 1; }
done
[[ $(id -u) -eq 0 ]] || { echo "error: building the node's root file system needs root (device nodes, file owners)" >&2; exit 1; }

mkdir -p "$CACHE/node-rootfs"
work="$(mktemp -d "$CACHE/node-rootfs/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"

echo ">> debootstrapping $SUITE (minbase + systemd) into $root" >&2
mmdebstrap --variant=minbase --quiet \
  --include=systemd,systemd-sysv,dbus,kmod,iproute2,udev,util-linux,procps,libseccomp2,bash,nftables \
  "$SUITE" "$root" >&2

echo ">> kernel modules from $kernel_pkg" >&2
deb_dir="$work/deb"
mkdir -p "$deb_dir"
(cd "$deb_dir" && apt-get download "$(cat "$kernel_dir/package")" >&2) || {
  echo "error: cannot download the kernel package $kernel_pkg" >&2
  exit 1
}
# dpkg-deb -x would replace the /lib symlink (usrmerge) with a directory: tar keeps it.
dpkg-deb --fsys-tarfile "$deb_dir"/*.deb | tar -x --keep-directory-symlink -C "$root" ./lib/modules
kver="$(ls "$root/lib/modules" | head -1)"
# The root's own kmod (the host may have none).
chroot "$root" depmod -a "$kver"

echo ">> kubelet and the node runtime" >&2
install -m 0755 "$kubelet" "$root/usr/local/bin/kubelet"
for b in containerd containerd-shim-runc-v2 ctr runc; do
  install -m 0755 "$runtime/$b" "$root/usr/local/bin/$b"
done
mkdir -p "$root/opt/cni/bin"
for b in loopback bridge host-local; do
  install -m 0755 "$runtime/cni/$b" "$root/opt/cni/bin/$b"
done

echo ">> units and configuration (tests/node/rootfs)" >&2
cp -a "$repo/tests/node/rootfs/." "$root/"
chmod 0755 "$root/usr/local/sbin/"* 2>/dev/null || true
systemctl --root="$root" enable systemd-networkd.service nodemem-node-setup.service nodemem-node-runner.service containerd.service kubelet.service >&2
# No login prompt on the serial console, no units the node does not need.
systemctl --root="$root" mask serial-getty@ttyS0.service getty@tty1.service \
  systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer >&2 || true
echo "nodemem-node" >"$root/etc/hostname"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
rm -f "$root/etc/resolv.conf"
echo "nameserver 10.0.2.3" >"$root/etc/resolv.conf"
: >"$root/etc/machine-id"

# The initramfs stage (built by the harness with busybox) loads what Debian builds as
# modules before it can mount the root disk: the virtio PCI and block drivers and ext4,
# in dependency order (modprobe's own resolution), uncompressed for busybox's insmod.
mkdir -p "$work/initrd-modules"
for module in virtio_pci virtio_blk ext4; do
  # One module per call: the words after a module name are its parameters.
  chroot "$root" modprobe -S "$kver" --show-depends "$module"
done | awk '$1 == "insmod" {print $2}' | awk '!seen[$0]++' >"$work/initrd-modules.list"
: >"$work/initrd-modules/order"
while read -r ko; do
  base="$(basename "$ko")"
  case "$base" in
    *.xz) xz -dc "$root$ko" >"$work/initrd-modules/${base%.xz}"; base="${base%.xz}" ;;
    *.zst) zstd -qdc "$root$ko" >"$work/initrd-modules/${base%.zst}"; base="${base%.zst}" ;;
    *) cp "$root$ko" "$work/initrd-modules/$base" ;;
  esac
  echo "$base" >>"$work/initrd-modules/order"
done <"$work/initrd-modules.list"
[[ -s "$work/initrd-modules/order" ]] || { echo "error: found no modules for the initramfs (virtio_pci, virtio_blk, ext4)" >&2; exit 1; }

echo ">> writing the ext4 image" >&2
mke2fs -q -t ext4 -L nodemem-root -d "$root" -F "$work/root.img" 3G >&2
mkdir -p "$out"
mv "$work/initrd-modules" "$out/initrd-modules"
mv "$work/root.img" "$out/root.img"
echo "$kver" >"$out/kernel-release"
echo "$out/root.img"
