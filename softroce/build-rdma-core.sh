#!/bin/sh
# softroce/build-rdma-core.sh ROOTFS SOURCE PREFIX - build rdma-core (libibverbs, librdmacm, the
# providers, pyverbs) from SOURCE natively in the chroot ROOTFS and install it under PREFIX there.
#
# Why: rdma-core's own tests of version N need pyverbs N; the guest's Debian 12 has 44. PyPI's pyverbs
# sdist is all of rdma-core (tests/rdmacore/fetch.py --source unpacks it). Its libraries are private to
# that version (IBVERBS_PRIVATE_59), so the build is installed whole in PREFIX, beside Debian's, and
# used with LD_LIBRARY_PATH=PREFIX/lib PYTHONPATH=PREFIX/python. The build tools are installed in the
# chroot for the build and purged after. Needs root, a Debian mirror and PyPI (Cython 3.0: Debian 12
# has 0.29, and Cython >= 3.3 fails on v59).
set -eu
R=$1 SRC=$2 PREFIX=$3
DEPS="cmake ninja-build gcc pkg-config python3-dev python3-venv libnl-3-dev libnl-route-3-dev libudev-dev"
rm -rf "$R/tmp/rdma-core-src"
cp -a "$SRC" "$R/tmp/rdma-core-src"
cp /etc/resolv.conf "$R/etc/resolv.conf"
for ca in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
  [ -f "$ca" ] && { cp "$ca" "$R/tmp/host-ca.crt"; break; }
done
mount -t proc proc "$R/proc"
trap 'umount "$R/proc" 2>/dev/null || true; rm -rf "$R/tmp/rdma-core-src" "$R/tmp/rdma-core-build" "$R/tmp/cython" "$R/tmp/build.log" "$R/tmp/host-ca.crt"' EXIT
ca=/tmp/host-ca.crt
env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CERT=$ca REQUESTS_CA_BUNDLE=$ca SSL_CERT_FILE=$ca \
    DEPS="$DEPS" PREFIX="$PREFIX" DEBIAN_FRONTEND=noninteractive chroot "$R" /bin/sh -c '
  set -e
  t0=$(date +%s)
  dpkg-query -W -f="\${Package}\n" | sort > /tmp/packages-before
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends $DEPS >/dev/null
  python3 -m venv /tmp/cython
  /tmp/cython/bin/pip install --quiet --no-cache-dir "cython==3.0.12"
  t1=$(date +%s)
  mkdir -p /tmp/rdma-core-build && cd /tmp/rdma-core-build
  cmake -G Ninja -DCMAKE_BUILD_TYPE=Release -DNO_MAN_PAGES=1 -DNO_PYVERBS=0 -DENABLE_STATIC=0 \
    -DENABLE_VALGRIND=0 -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_PYTHON_ARCH_LIB="$PREFIX/python" \
    -DPYTHON_EXECUTABLE=/tmp/cython/bin/python /tmp/rdma-core-src >/tmp/build.log 2>&1 &&
  ninja -j"$(nproc)" >>/tmp/build.log 2>&1 && ninja install >>/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
  t2=$(date +%s)
  rm -rf "$PREFIX/share/man" "$PREFIX/share/doc" "$PREFIX/include" "$PREFIX/bin" "$PREFIX/sbin" "$PREFIX/libexec"
  # leave the guest as it was: every package the build brought in goes again
  new=$(dpkg-query -W -f="\${Package}\n" | sort | comm -13 /tmp/packages-before -)
  [ -z "$new" ] || apt-get purge -y -q $new >/dev/null
  rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /tmp/packages-before \
    /usr/share/doc /usr/share/man /usr/share/locale /usr/share/info
  echo "rdma-core: tools $((t1 - t0)) s, build and install $((t2 - t1)) s, $(du -sh "$PREFIX" | cut -f1) in $PREFIX"
'
