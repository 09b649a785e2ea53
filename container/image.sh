#!/usr/bin/env bash
# container/image.sh - build the lab's container image, run it, or refresh its pinned packages.
#
#   container/image.sh build [TAG]   build TAG (default rdmalab:latest) from container/Dockerfile   (make image)
#   container/image.sh run [TAG]     build, then serve the lab on http://localhost:8888               (make lab-container)
#   container/image.sh lock          re-pin binder/requirements.txt from pyproject.toml's dependencies (make image-lock)
#   container/image.sh engine        make sure a Docker engine answers, and stop
#
# Docker Desktop (macOS, Windows) or Docker/Podman on Linux need none of this: README.md gives the two
# `docker` commands. This script adds what a firewalled Linux machine (this project's CI) needs:
# - a Docker engine: where `docker info` reaches none, dockerd is started, after installing Debian's docker.io
#   if there is no dockerd (root; tools/need.sh docker), whatever docker client is on the PATH;
# - the base image: debian:bookworm-slim from a registry, else container/base.sh makes it from a Debian mirror;
# - a TLS-intercepting proxy's CA (PIP_CERT or SSL_CERT_FILE here) handed to pip inside the build.
# Knobs: RDMALAB_IMAGE_BASE (a base image to use as it is), DOCKER (docker or podman).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
DOCKER=${DOCKER:-docker}
say() { echo "[container] $*" >&2; }
fail() { say "$*"; exit 2; }

# an engine that answers (tools/need.sh docker: a client alone is not one; as root, Debian's docker.io and its dockerd)
engine() { "$ROOT/tools/need.sh" docker || exit 2; }

base() {
  if [ -n "${RDMALAB_IMAGE_BASE:-}" ]; then echo "$RDMALAB_IMAGE_BASE"; return; fi
  if "$DOCKER" image inspect debian:bookworm-slim >/dev/null 2>&1 ||
     timeout 60 "$DOCKER" pull -q debian:bookworm-slim >/dev/null 2>&1; then
    echo debian:bookworm-slim
  else
    say "no registry reachable for debian:bookworm-slim: making the same Debian from a mirror"
    "$HERE/base.sh"
  fi
}

build() {
  local tag=${1:-rdmalab:latest} from ca started=$SECONDS
  engine
  from=$(base)
  ca=
  for file in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}"; do [ -f "$file" ] && { ca=$file; break; }; done
  if [ -n "$ca" ]; then cp "$ca" "$HERE/extra-ca.crt"; trap 'rm -f "$HERE/extra-ca.crt"' EXIT; fi
  say "building $tag from $from (pip downloads about 150 MB the first time)"
  "$DOCKER" build -t "$tag" --build-arg "BASE=$from" -f "$HERE/Dockerfile" "$ROOT" > /tmp/rdmalab-image-build.log 2>&1 ||
    { tail -20 /tmp/rdmalab-image-build.log >&2; fail "docker build failed (log: /tmp/rdmalab-image-build.log)"; }
  rm -f "$HERE/extra-ca.crt"
  say "built $tag in $((SECONDS - started)) s: $("$DOCKER" image inspect -f '{{.Size}}' "$tag" | awk '{printf "%d MB", $1 / 1e6}')"
}

case "${1:-}" in
  build) build "${2:-}" ;;
  run)
    build "${2:-}"
    exec "$DOCKER" run --rm -it -p 127.0.0.1:8888:8888 --shm-size=1g "${2:-rdmalab:latest}" ;;
  engine) engine ;;
  lock)
    engine
    from=$(base)
    deps=$(python3 -c "import tomllib; print('\n'.join(tomllib.load(open('$ROOT/pyproject.toml', 'rb'))['project']['dependencies']))")
    ca=/etc/ssl/certs/ca-certificates.crt
    for file in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}"; do [ -f "$file" ] && { ca=$file; break; }; done
    frozen=$("$DOCKER" run --rm -v "$ca:/tmp/ca.crt:ro" -e PIP_CERT=/tmp/ca.crt -e DEBIAN_FRONTEND=noninteractive -e DEPS="$deps" \
      "$from" sh -c 'apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends python3 python3-venv >/dev/null &&
        python3 -m venv /v && echo "$DEPS" > /tmp/deps.txt && /v/bin/pip install -q --no-cache-dir -r /tmp/deps.txt && /v/bin/pip freeze')
    { sed -n '/^#/p' "$ROOT/binder/requirements.txt"; echo "$frozen"; } > "$ROOT/binder/requirements.txt.new"
    mv "$ROOT/binder/requirements.txt.new" "$ROOT/binder/requirements.txt"
    say "binder/requirements.txt: $(echo "$frozen" | wc -l) packages pinned" ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
