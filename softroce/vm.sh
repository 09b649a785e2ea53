#!/usr/bin/env bash
# softroce/vm.sh - run a command inside a QEMU guest that has a real Soft-RoCE device, rxe0.
#
#   softroce/vm.sh [CMD ARGS...]     (default: sh softroce/guest-tests.sh)
#   softroce/vm.sh --build           build (or check) the cached guest and stop, booting nothing
#   softroce/vm.sh --pair [CMD ARGS...]   (default: sh softroce/pair-tests.sh)
#       two guests from the same cached image, "a" (10.20.0.1) and "b" (10.20.0.2), each with its own
#       rxe0 over eth0, joined by a virtual Ethernet link (a QEMU socket netdev over this machine's
#       loopback: the addresses exist only on that link), root ssh between them. CMD runs on both (the
#       environment says which: RDMALAB_PAIR=a|b, RDMALAB_PAIR_ADDRESS, RDMALAB_PAIR_PEER); a's output
#       is shown as it comes, b's after; exits with a's status, else b's. Everything on the link is
#       captured from outside both guests into $RDMALAB_VM_PCAP (default ~/.cache/rdmalab/pair-link.pcap).
#       Two guests take twice RDMALAB_VM_MEM (8 GiB by default) and share this machine's CPUs.
#
# The guest is Debian 12 with Linux's rdma_rxe driver, rdma-core, Debian's python3-pyverbs and a
# venv /opt/rdmalab holding softroce/requirements-guest.txt. This checkout (tracked and untracked
# files, not ignored ones) is copied to /project, where CMD runs. Prints CMD's output and exits
# with its status; 124 = the guest gave no status (timeout, crash), 125 = the guest failed to start.
#
# First run: needs root, qemu/debootstrap (installed with apt-get if missing) and a Debian mirror;
# builds the guest in about 3-5 minutes and caches it. Later runs boot in about 20 s.
# Why a VM: this machine's kernel has no RDMA; under QEMU's software CPU emulation (TCG) a stock
# Debian kernel runs rdma_rxe. Timings inside say nothing about real performance.
#
# Knobs: RDMALAB_VM_DIR (cache, default ~/.cache/rdmalab/softroce-vm), RDMALAB_VM_MEM (MiB, 4096),
#        RDMALAB_VM_SMP (2), RDMALAB_VM_TIMEOUT (s, 2400), RDMALAB_VM_MIRROR (Debian mirror URL),
#        RDMALAB_VM_PCAP (the pair's capture).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PROJECT=$(dirname "$HERE")
W=${RDMALAB_VM_DIR:-$HOME/.cache/rdmalab/softroce-vm}
MEM=${RDMALAB_VM_MEM:-4096}
SMP=${RDMALAB_VM_SMP:-2}
TIMEOUT=${RDMALAB_VM_TIMEOUT:-2400}
# x86-64-v2: PyPI's numpy needs SSE4.2 and POPCNT, which QEMU's default qemu64 model lacks
CPU=qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16
SUITE=bookworm
# openssh and procps for the two-host pair (vm.sh --pair): ranks started over ssh, as on two machines;
# rdmacm-utils for rping, the check docs/cluster.md starts with
GUEST_PACKAGES=python3,python3-venv,python3-pyverbs,rdma-core,ibverbs-providers,ibverbs-utils,perftest,iproute2,kmod,ca-certificates,openssh-server,openssh-client,procps,rdmacm-utils
MODULES="rdma_rxe rdma_ucm crc32_generic dummy veth virtio_pci virtio_net"

say() { echo "[softroce-vm] $*" >&2; }
fail() { say "$*"; exit 2; }

# Each cached stage is keyed by what it was built from, so an edited recipe rebuilds what it changed.
ROOTFS_KEY=$( { echo "$SUITE $GUEST_PACKAGES"; cat "$HERE/requirements-guest.txt"; } | sha256sum | cut -c1-16)
# rdma-core's own tests (tests/rdmacore) need the pyverbs of their version: built from PyPI's sdist
RDMA_CORE_VERSION=${RDMALAB_RDMA_CORE_VERSION:-59.0}
RDMA_CORE_KEY=$( { echo "$ROOTFS_KEY $RDMA_CORE_VERSION"; cat "$HERE/build-rdma-core.sh"; } | sha256sum | cut -c1-16)
# and an older release's, whose tests still use pyverbs <= 58's enum modules (PyPI keeps 57.0's sdist)
OLDER_RDMA_CORE_VERSION=${RDMALAB_OLDER_RDMA_CORE_VERSION:-57.0}
OLDER_RDMA_CORE_KEY=$( { echo "$ROOTFS_KEY $OLDER_RDMA_CORE_VERSION"; cat "$HERE/build-rdma-core.sh"; } | sha256sum | cut -c1-16)
GUEST_KEY=$( { echo "$ROOTFS_KEY $RDMA_CORE_KEY $OLDER_RDMA_CORE_KEY $MODULES"; cat "$HERE/init"; } | sha256sum | cut -c1-16)

build_needed() { [ "$(cat "$W/kernel/.key" 2>/dev/null)" != done ] || [ "$(cat "$W/guest.key" 2>/dev/null)" != "$GUEST_KEY" ]; }

# 0. What the first build needs -----------------------------------------------------------------
if build_needed && [ "$(id -u)" != 0 ]; then
  fail "building the Soft-RoCE guest needs root (apt-get, debootstrap, chroot): run 'sudo make test-softroce'"
fi
# qemu, debootstrap, cpio and depmod that run (tools/need.sh guest: installed with apt-get as root where they do not)
"$PROJECT/tools/need.sh" guest || exit 2
mkdir -p "$W"
exec 9>"$W/.lock"; flock 9          # one build at a time; runs themselves can overlap

# 1. A Debian kernel, which ships rdma_rxe as a module -------------------------------------------
kernel_package() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
if [ "$(cat "$W/kernel/.key" 2>/dev/null)" != done ]; then
  pkg=$(kernel_package); [ -n "$pkg" ] || { apt-get update -q >/dev/null 2>&1 || true; pkg=$(kernel_package); }
  [ -n "$pkg" ] || fail "apt cannot find linux-image-amd64: this host needs a reachable Debian/Ubuntu mirror"
  say "downloading $pkg"
  rm -rf "$W/kernel" "$W/download"; mkdir -p "$W/kernel" "$W/download"
  (cd "$W/download" && apt-get download -q "$pkg" >/dev/null 2>&1) || fail "apt-get download $pkg failed (mirror unreachable?)"
  dpkg-deb -x "$W"/download/*.deb "$W/kernel"; rm -rf "$W/download"
  echo done > "$W/kernel/.key"
fi
KVER=$(ls "$W/kernel/lib/modules" | head -1)

# 2. The guest's root filesystem: Debian minbase, RDMA packages, the lab's Python venv ----------
R="$W/rootfs"
if [ "$(cat "$R/.key" 2>/dev/null)" != "$ROOTFS_KEY" ]; then
  MIRROR=${RDMALAB_VM_MIRROR:-$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}
  [ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
  say "debootstrap $SUITE from $MIRROR (about 2 minutes)"
  rm -rf "$R"
  debootstrap --variant=minbase --include="$GUEST_PACKAGES" "$SUITE" "$R" "$MIRROR" > "$W/debootstrap.log" 2>&1 ||
    { tail -15 "$W/debootstrap.log" >&2; fail "debootstrap failed (log: $W/debootstrap.log); set RDMALAB_VM_MIRROR to a Debian mirror"; }
  say "installing the lab's Python packages into the guest's /opt/rdmalab"
  cp "$HERE/requirements-guest.txt" "$R/tmp/requirements.txt"
  cp /etc/resolv.conf "$R/etc/resolv.conf"
  # pip in the chroot trusts what the host trusts (a proxy's own CA included) and ignores the
  # host's pip settings that name host paths
  for ca in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    [ -f "$ca" ] && { cp "$ca" "$R/tmp/host-ca.crt"; break; }
  done
  mount -t proc proc "$R/proc"
  trap 'umount "$R/proc" 2>/dev/null || true' EXIT
  ca=/tmp/host-ca.crt
  env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CERT=$ca REQUESTS_CA_BUNDLE=$ca CURL_CA_BUNDLE=$ca SSL_CERT_FILE=$ca chroot "$R" /bin/sh -c 'set -e
    python3 -m venv --system-site-packages /opt/rdmalab
    /opt/rdmalab/bin/pip install --quiet --no-cache-dir -r /tmp/requirements.txt
    # warm the caches every boot would otherwise rebuild under slow CPU emulation
    HOME=/root MPLBACKEND=Agg /opt/rdmalab/bin/python -c "import matplotlib.pyplot, pyverbs.device"
    # one key for root, trusted by every guest of this image: the pair logs in to each other as two
    # machines of a cluster would (the guests exist only on this machine and its loopback)
    mkdir -p -m 700 /root/.ssh
    ssh-keygen -q -t ed25519 -N "" -f /root/.ssh/id_ed25519
    cp /root/.ssh/id_ed25519.pub /root/.ssh/authorized_keys' \
    > "$W/pip.log" 2>&1 || { tail -15 "$W/pip.log" >&2; fail "pip install in the guest failed (log: $W/pip.log; PyPI unreachable?)"; }
  umount "$R/proc"; trap - EXIT
  rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* "$R"/usr/share/{doc,man,locale,info} "$R"/tmp/{requirements.txt,host-ca.crt}
  echo "$ROOTFS_KEY" > "$R/.key"
fi

# 2b. rdma-core (libibverbs, librdmacm, providers, pyverbs) and its tests/, built natively in the chroot
#     (about 3 minutes each), for tests/rdmacore: $RDMA_CORE_VERSION in /opt/rdma-core, and the older
#     $OLDER_RDMA_CORE_VERSION in /opt/rdma-core-older
build_rdma_core() {   # VERSION PREFIX KEY-FILE KEY
  [ "$(cat "$R/$3" 2>/dev/null)" = "$4" ] && return 0
  say "building rdma-core $1's pyverbs in the guest (about 3 minutes)"
  src=$(RDMALAB_RDMA_CORE_VERSION=$1 "${PYTHON:-python3}" "$PROJECT/tests/rdmacore/fetch.py" --source) ||
    fail "could not fetch rdma-core $1 from PyPI (pip download pyverbs==$1)"
  rm -rf "$R$2"
  start=$(date +%s)
  sh "$HERE/build-rdma-core.sh" "$R" "$src" "$2" > "$W/rdma-core-$1.log" 2>&1 ||
    { tail -15 "$W/rdma-core-$1.log" >&2; fail "building rdma-core $1 in the guest failed (log: $W/rdma-core-$1.log)"; }
  cp -a "$src/tests" "$R$2/tests"; echo "$1" > "$R$2/VERSION"
  say "$(tail -1 "$W/rdma-core-$1.log") ($(( $(date +%s) - start )) s in all)"
  echo "$4" > "$R/$3"
}
build_rdma_core "$RDMA_CORE_VERSION" /opt/rdma-core .rdma-core.key "$RDMA_CORE_KEY"
build_rdma_core "$OLDER_RDMA_CORE_VERSION" /opt/rdma-core-older .rdma-core-older.key "$OLDER_RDMA_CORE_KEY"

# 3. Kernel modules and /init, packed as an uncompressed initramfs (fastest to unpack under TCG) --
if [ "$(cat "$W/guest.key" 2>/dev/null)" != "$GUEST_KEY" ]; then
  say "packing the guest"
  rm -rf "$R/lib/modules"; mkdir -p "$R/lib/modules/$KVER"
  depmod -b "$W/kernel" "$KVER"
  for m in $MODULES; do modprobe -d "$W/kernel" -S "$KVER" --show-depends "$m"; done |
    awk '$1 == "insmod" {print $2}' | sort -u | while read -r f; do
      rel=${f#"$W/kernel/"}; mkdir -p "$R/$(dirname "$rel")"; cp "$f" "$R/$rel"; done
  cp "$W/kernel/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KVER/"
  depmod -b "$R" "$KVER"
  install -m 755 "$HERE/init" "$R/init"
  (cd "$R" && find . \( -path ./.key -o -path './.rdma-core*.key' \) -prune -o -print0 | cpio --null -o -H newc --quiet) > "$W/guest.cpio.new"
  mv "$W/guest.cpio.new" "$W/guest.cpio"
  echo "$GUEST_KEY" > "$W/guest.key"
fi
flock -u 9
if [ "${1:-}" = --build ]; then say "the guest is built: $W"; exit 0; fi

# 4. This run: the project and the command, appended as a second initramfs; boot ----------------
PAIR=0
if [ "${1:-}" = --pair ]; then PAIR=1; shift; [ $# -gt 0 ] || set -- sh softroce/pair-tests.sh; fi
[ $# -gt 0 ] || set -- sh softroce/guest-tests.sh
RUN=$(mktemp -d "$W/run.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
mkdir -p "$RUN/overlay/project"
{ printf 'exec'; printf ' %q' "$@"; printf '\n'; } > "$RUN/overlay/run.sh"
if git -C "$PROJECT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$PROJECT" && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
     cpio --null -pdm --quiet "$RUN/overlay/project")
else
  cp -a "$PROJECT"/{pyproject.toml,rdmalab,tests,notebooks,examples,softroce} "$RUN/overlay/project/"
fi
(cd "$RUN/overlay" && find . -print0 | cpio --null -o -H newc --quiet) > "$RUN/overlay.cpio"
cat "$W/guest.cpio" "$RUN/overlay.cpio" > "$RUN/initrd"

boot() {   # NAME OUTPUT [QEMU ARGS...]: one guest; its command's output goes to OUTPUT, its status to $RUN/NAME.status
  local name=$1 output=$2; shift 2
  : > "$RUN/$name.status"
  timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu "$CPU" -smp "$SMP" -m "$MEM" \
    -display none -monitor none -no-reboot -kernel "$W/kernel/boot/vmlinuz-$KVER" -initrd "$RUN/initrd" \
    -serial file:"$RUN/$name.console" -serial "$output" -serial file:"$RUN/$name.status" "$@" < /dev/null
}
status_of() {   # NAME: the guest's exit status, or 124 with its console's tail when it gave none
  local rc
  rc=$(sed -n 's/^RDMALAB_VM_EXIT=\([0-9]*\).*/\1/p' "$RUN/$1.status" | tail -1)
  if [ -z "$rc" ]; then
    say "guest $1 reported no exit status (124 = it timed out after ${TIMEOUT}s, or crashed). Its console's tail:"
    tail -20 "$RUN/$1.console" >&2
    rc=124
  fi
  echo "$rc"
}

set +e
if [ $PAIR = 0 ]; then
  say "booting the guest (Linux $KVER, rxe0 over dummy0; about 20 s before the command starts)"
  boot guest stdio -nic none -append "console=ttyS0 panic=-1 quiet mitigations=off"
  rc=$(status_of guest)
else
  # the link: each guest's frames go in UDP datagrams to a port of this machine's loopback where the other
  # guest reads (connectionless: either may start first); QEMU's filter-dump writes every frame that
  # crosses it (pcap, Ethernet), as the wire between two hosts would show it
  PCAP=${RDMALAB_VM_PCAP:-$(dirname "$W")/pair-link.pcap}
  mkdir -p "$(dirname "$PCAP")"; rm -f "$PCAP"
  read -r pa pb < <(python3 -c 'import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
  say "booting two guests, a (10.20.0.1) and b (10.20.0.2), joined by a link on 127.0.0.1:$pa-$pb; capturing it into $PCAP"
  append="console=ttyS0 panic=-1 quiet mitigations=off rdmalab.pair"
  a='' b=''
  trap 'kill $a $b 2>/dev/null; rm -rf "$RUN"' EXIT   # (vm.sh stopped: no guest left running)
  trap 'exit 143' TERM INT
  boot a stdio -netdev socket,id=link,udp=127.0.0.1:$pb,localaddr=127.0.0.1:$pa \
    -device virtio-net-pci,netdev=link,mac=52:54:00:20:00:01 -object filter-dump,id=capture,netdev=link,file="$PCAP" \
    -append "$append=a" &
  a=$!
  boot b file:"$RUN/b.out" -netdev socket,id=link,udp=127.0.0.1:$pa,localaddr=127.0.0.1:$pb \
    -device virtio-net-pci,netdev=link,mac=52:54:00:20:00:02 -append "$append=b" &
  b=$!
  wait "$a"
  # b ends seconds after a tells it so; if a could not (it failed before, or crashed), b is stopped
  for _ in $(seq 60); do kill -0 "$b" 2>/dev/null || break; sleep 1; done
  kill "$b" 2>/dev/null && say "guest b was still running 60 s after guest a ended: stopped it"
  wait "$b"
  echo "== guest b's output (10.20.0.2)"; cat "$RUN/b.out"
  rc_a=$(status_of a); rc_b=$(status_of b)
  say "guest a exited $rc_a, guest b $rc_b; the link's capture: $PCAP ($(stat -c %s "$PCAP" 2>/dev/null || echo 0) bytes)"
  rc=$rc_a; [ "$rc" != 0 ] || rc=$rc_b
fi
exit "$rc"
