#!/bin/bash
# Run pod-limit tests on a kernel that has ONLY the unified cgroup hierarchy (cgroup v2).
#
# Why: a host whose memory/pids/cpu controllers sit on cgroup v1 hierarchies never runs the
# agent's v2 path (memory.max, pids.max, cpu.max, cgroup.kill, cgroup.subtree_control). This
# boots a stock Debian kernel under qemu (KVM where it can, else TCG) with `cgroup_no_v1=all`, the host's root filesystem as
# the guest's root (virtio-9p, read-only), this checkout shared writable, and runs pytest in it.
# Not part of `make test`.
#
# Prerequisites (outside the project, as root on a Debian 12 host; /dev/kvm makes it fast):
#   apt-get install --no-install-recommends qemu-system-x86 linux-image-amd64 busybox-static
#   make .venv/.installed-test      # the checkout's venv: the guest runs it at the same path
#
# Usage: tools/cgroup2_vm.sh [pytest args...]
#   default args: tests/agent/test_cgroups.py tests/agent/test_hostile_jobs.py -q
#   env: KERNEL (default: newest /boot/vmlinuz-*), VM_MEM (4G), VM_CPUS (2), VM_TIMEOUT (2400 s),
#        VM_ACCEL (qemu accelerator and CPU flags; default: KVM, or TCG on a PVM host),
#        VM_APPEND (extra kernel arguments; default: quiet),
#        OUT (default: a new temp dir; gets console.log, pytest.log, rc).
# Exit status: pytest's, as the guest recorded it (125 when the guest recorded none).
#
# Inside the guest this same file runs again with --guest as PID 1 (after the initramfs mounted
# the shares): pytest runs in the root cgroup, where the agent itself enables the controllers.
set -euo pipefail

guest() {
    # PID 1 of the guest, on the host's root filesystem (read-only) with the checkout writable.
    export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    local repo=$1 out=/tmp/out
    shift
    mount -t proc proc /proc
    mount -t sysfs sys /sys
    mount -t devtmpfs dev /dev
    mkdir -p /dev/pts /dev/shm /dev/mqueue
    mount -t devpts devpts /dev/pts
    mount -t tmpfs tmpfs /dev/shm
    mount -t mqueue mqueue /dev/mqueue
    mount -t cgroup2 cgroup2 /sys/fs/cgroup
    for d in /tmp /var/tmp /run; do mount -t tmpfs -o mode=1777 tmpfs "$d"; done
    mkdir -m 700 /tmp/home  # HOME: the host's /root stays read-only (pyenv lives there)
    mkdir -p "$out"
    mount -t 9p -o trans=virtio,version=9p2000.L out "$out"
    ip link set lo up
    hostname cgroup2-vm
    {
        echo "kernel: $(uname -r)"
        echo "cmdline: $(cat /proc/cmdline)"
        echo "cgroup mounts: $(grep cgroup /proc/mounts | tr '\n' ';')"
        echo "root cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
        echo "root cgroup.subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
        echo "pytest $*"
    } >"$out/pytest.log"
    local rc=0
    (cd "$repo" && HOME=/tmp/home TMPDIR=/tmp PYTHONUNBUFFERED=1 timeout 2100 .venv/bin/python -m pytest "$@" -p no:cacheprovider) \
        >>"$out/pytest.log" 2>&1 || rc=$?
    echo "$rc" >"$out/rc"
    sync
    umount "$out" || true
    echo o >/proc/sysrq-trigger
    sleep 60
}

if [ "${1:-}" = "--guest" ]; then
    shift
    guest "$@"
    exit 0
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
# KVM when it can run a stock kernel; a PVM host's /dev/kvm (kvm_pvm: nested without hardware
# virtualisation, as on this project's build machine) only runs PVM guests and hangs this one
# right after "Probing EDD", so there the guest is emulated (TCG: slower, same kernel).
if [ -z "${VM_ACCEL:-}" ]; then
    if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then
        VM_ACCEL="-enable-kvm -cpu host,-arch-capabilities"
    else
        VM_ACCEL="-accel tcg,thread=multi -cpu max"
    fi
fi
kernel=${KERNEL:-$(ls -1v /boot/vmlinuz-* | tail -n 1)}
kver=${kernel#/boot/vmlinuz-}
moddir=/lib/modules/$kver
busybox=$(command -v busybox) || { echo "needs busybox-static" >&2; exit 2; }
[ -x "$repo/.venv/bin/python" ] || { echo "needs $repo/.venv (make .venv/.installed-test)" >&2; exit 2; }
[ $# -gt 0 ] || set -- tests/agent/test_cgroups.py tests/agent/test_hostile_jobs.py -q
out=${OUT:-$(mktemp -d /tmp/cgroup2-vm.XXXXXX)}
mkdir -p "$out"
rm -f "$out/rc" "$out/pytest.log"
work=$(mktemp -d /tmp/cgroup2-vm-initrd.XXXXXX)
trap 'rm -rf "$work"' EXIT

# A minimal initramfs: busybox, the virtio/9p modules (with their dependencies), and an init
# that mounts the host's root read-only and this checkout writable, then runs --guest.
init=$work/root
mkdir -p "$init"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$busybox" "$init/bin/busybox"
modules=()
add_module() {  # $1: a path from modules.dep; its dependencies first
    local path=$1 dep
    for dep in $(grep "^$path:" "$moddir/modules.dep" | cut -d: -f2); do add_module "$dep"; done
    case " ${modules[*]} " in *" $path "*) ;; *) modules+=("$path") ;; esac
}
for name in virtio_pci 9pnet_virtio 9p; do
    add_module "$(grep -oE "^[^:]*/$name\.ko[^:]*" "$moddir/modules.dep")"
done
: >"$init/modules"
for path in "${modules[@]}"; do
    file=$(basename "$path")
    case "$file" in
        *.xz) xz -dc "$moddir/$path" >"$init/lib/modules/${file%.xz}"; file=${file%.xz} ;;
        *.zst) zstd -qdc "$moddir/$path" >"$init/lib/modules/${file%.zst}"; file=${file%.zst} ;;
        *) cp "$moddir/$path" "$init/lib/modules/$file" ;;
    esac
    echo "/lib/modules/$file" >>"$init/modules"
done
guest_args=$(printf '%q ' "$repo" "$@")
cat >"$init/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t devtmpfs dev /dev
for m in \$(cat /modules); do insmod \$m || echo "insmod \$m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /newroot \
    || { echo "cannot mount the host root"; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 repo /newroot$repo \
    || { echo "cannot mount the checkout"; poweroff -f; }
umount /dev /proc
exec switch_root /newroot /bin/bash $repo/tools/cgroup2_vm.sh --guest $guest_args
EOF
chmod +x "$init/init"
(cd "$init" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"

echo "kernel $kernel; output in $out" >&2
rc=0
timeout "${VM_TIMEOUT:-2400}" qemu-system-x86_64 \
    $VM_ACCEL -smp "${VM_CPUS:-2}" -m "${VM_MEM:-4G}" \
    -kernel "$kernel" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 panic=-1 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 ${VM_APPEND:-quiet}" \
    -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
    -fsdev local,id=repo,path="$repo",security_model=passthrough,multidevs=remap \
    -device virtio-9p-pci,fsdev=repo,mount_tag=repo \
    -fsdev local,id=out,path="$out",security_model=passthrough \
    -device virtio-9p-pci,fsdev=out,mount_tag=out \
    -display none -no-reboot -serial file:"$out/console.log" -monitor none \
    || rc=$?
[ "$rc" = 0 ] || echo "qemu exited with $rc (see $out/console.log)" >&2
[ -f "$out/pytest.log" ] && cat "$out/pytest.log"
[ -f "$out/rc" ] || { echo "the guest recorded no result; console: $out/console.log" >&2; exit 125; }
exit "$(cat "$out/rc")"
