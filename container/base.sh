#!/usr/bin/env bash
# container/base.sh - make the image's base, Debian 12 (bookworm) minbase, without an image registry.
#
#   container/base.sh [TAG]      (default TAG: rdmalab-base:bookworm; prints the tag it made)
#
# Where a registry is reachable, container/Dockerfile starts FROM debian:bookworm-slim and this is not
# needed. Where none is (a firewalled CI machine, this project's), the same Debian comes from a Debian
# mirror: debootstrap builds it once (about 2 minutes, root) into a tarball cached in
# ~/.cache/rdmalab/container-base, and `docker import` turns it into an image in seconds.
# Knobs: RDMALAB_IMAGE_CACHE (the cache directory), RDMALAB_VM_MIRROR (the Debian mirror, as softroce/vm.sh).
set -euo pipefail
TAG=${1:-rdmalab-base:bookworm}
SUITE=bookworm
CACHE=${RDMALAB_IMAGE_CACHE:-$HOME/.cache/rdmalab/container-base}
TARBALL=$CACHE/$SUITE-minbase.tar
say() { echo "[container/base] $*" >&2; }
fail() { say "$*"; exit 2; }

command -v docker >/dev/null || fail "no docker here: install Docker (Debian: apt-get install docker.io) or Podman"
if [ ! -s "$TARBALL" ]; then
  [ "$(id -u)" = 0 ] || fail "debootstrap needs root: run 'sudo container/base.sh', or pull debian:bookworm-slim from a registry"
  "$(dirname "$0")/../tools/need.sh" debootstrap || exit 2
  MIRROR=${RDMALAB_VM_MIRROR:-$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}
  [ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
  mkdir -p "$CACHE"
  root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  say "debootstrap $SUITE (minbase) from $MIRROR: about 2 minutes, once"
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" > "$CACHE/debootstrap.log" 2>&1 ||
    { tail -15 "$CACHE/debootstrap.log" >&2; fail "debootstrap failed (log: $CACHE/debootstrap.log); set RDMALAB_VM_MIRROR to a Debian mirror"; }
  # what debian:bookworm-slim also leaves out: apt's downloads and lists, docs, man pages
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/{doc,man,info}/*
  tar -C "$root" -cf "$TARBALL.part" . && mv "$TARBALL.part" "$TARBALL"
fi
docker image inspect "$TAG" >/dev/null 2>&1 && { echo "$TAG"; exit 0; }   # (a new import would void docker build's cache)
docker import --change 'CMD ["/bin/bash"]' "$TARBALL" "$TAG" >/dev/null
echo "$TAG"
