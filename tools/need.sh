#!/usr/bin/env bash
# tools/need.sh - make sure a tool that make test, make image or the Soft-RoCE guest needs works here,
# installing it (Debian's package, as root with apt-get) when it does not.
#
#   tools/need.sh docker | chromium | tshark | npm | debootstrap | guest ...   each in turn; exit 2 if one cannot be had
#   tools/need.sh --report                                        what each tool is here now (.ci/run's last lines)
#
# Each step decides by what its users need to run, not by whether a command's name is on the PATH: a docker
# client with no engine (a static binary, Docker Desktop's CLI alone), a chromium that is a shim for a snap,
# an npm that does not start are all "not working" and are installed over. Where a step cannot install (not
# root, no apt-get, a remote DOCKER_HOST that does not answer), it says which and what to do, and exits 2.
#
#   docker    `$DOCKER info` reaches an engine (DOCKER: docker or podman). Else: a dockerd here is started;
#             with none, Debian's docker.io is installed and its dockerd started.
#   chromium  $CHROMIUM (default /usr/bin/chromium, what tests/browser drives) renders a page headless.
#   tshark    `tshark -v` runs (tests/wire's judge of pcaps; installed never setuid).
#   npm       `npm --version` runs (the class hub's proxy, configurable-http-proxy, comes from npm).
#   debootstrap  `debootstrap --version` runs (container/base.sh's image base, where no registry answers).
#   guest     qemu-system-x86_64, debootstrap, cpio and depmod run (softroce/vm.sh's first build).
#
# Every install and start is appended to $RDMALAB_INSTALL_LOG (default /tmp/rdmalab-installed.log), one line
# each: what, which version, why. .ci/run empties it first and prints it last with --report: on a fresh machine
# it lists everything make test and the guest's build installed; on one an earlier run set up, nothing.
set -uo pipefail
DOCKER=${DOCKER:-docker}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
LEDGER=${RDMALAB_INSTALL_LOG:-/tmp/rdmalab-installed.log}
say() { echo "[need] $*" >&2; }
cannot() { say "$*"; exit 2; }
noted() { echo "$(date -u +%H:%M:%S) $*" >> "$LEDGER"; }
version_of() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo "?"; }

# apt_install WHY PACKAGE...: as root with apt-get, or say why not and what to run instead.
apt_install() {
  local why=$1; shift
  if [ "$(id -u)" != 0 ]; then
    cannot "$why, and only root can install it here: run as root (sudo make test), or: sudo apt-get install $*"
  fi
  command -v apt-get >/dev/null ||
    cannot "$why, and this machine has no apt-get: install $* with its own package manager, then run again"
  say "$why: installing $* (apt-get; log: /tmp/rdmalab-apt-$1.log)"
  # one apt-get at a time: .ci/run builds the guest (need.sh guest) while make test installs its own tools
  # (the lock is on a descriptor apt-get does not inherit: a daemon a package starts must not hold it for ever)
  { flock -w 900 8 || cannot "another install step held /tmp/rdmalab-apt.lock for 15 minutes"
    { apt-get update -q -o DPkg::Lock::Timeout=600 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends -o DPkg::Lock::Timeout=600 "$@"; } 8>&- > "/tmp/rdmalab-apt-$1.log" 2>&1
  } 8> /tmp/rdmalab-apt.lock ||
    { tail -5 "/tmp/rdmalab-apt-$1.log" >&2; cannot "apt-get could not install $*"; }
  local package
  for package in "$@"; do noted "installed $package $(version_of "$package") (apt-get): $why"; done
}

# --- docker: an engine that answers ------------------------------------------------------------------------
engine_answers() { timeout 30 "$DOCKER" info >/dev/null 2>&1; }

start_dockerd() {
  say "starting dockerd (log: /tmp/rdmalab-dockerd.log)"
  setsid dockerd > /tmp/rdmalab-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 60); do
    if engine_answers; then
      noted "started dockerd $(dockerd --version 2>/dev/null | awk '{print $3}' | tr -d ,) (pid $(pgrep -xo dockerd || echo ?))"
      return 0
    fi
    sleep 1
  done
  tail -5 /tmp/rdmalab-dockerd.log >&2
  cannot "dockerd did not start within 60 s (log: /tmp/rdmalab-dockerd.log)"
}

need_docker() {
  engine_answers && return 0
  if [ "$DOCKER" != docker ]; then
    command -v "$DOCKER" >/dev/null || cannot "no $DOCKER here: install it, or leave DOCKER unset to use docker"
    cannot "$DOCKER info fails: $(timeout 30 "$DOCKER" info 2>&1 | tail -1)"
  fi
  case "${DOCKER_HOST:-unix://}" in
    unix://*) ;;
    *) cannot "DOCKER_HOST=$DOCKER_HOST does not answer: start that engine, or unset DOCKER_HOST to use one on this machine" ;;
  esac
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    local why="no Docker engine here"
    command -v docker >/dev/null && why="docker ($(command -v docker)) cannot reach an engine and there is no dockerd"
    command -v dockerd >/dev/null && ! command -v docker >/dev/null && why="there is a dockerd but no docker client"
    apt_install "$why" docker.io
    engine_answers && return 0   # (where systemd runs, the package started it)
  fi
  [ "$(id -u)" = 0 ] || cannot "docker cannot reach its engine: start it (sudo systemctl start docker, or Docker Desktop)"
  start_dockerd
}

# --- the others: a command that runs ------------------------------------------------------------------------
# need_working WHAT CHECK PACKAGE...: CHECK (a function) runs, or PACKAGE is installed and CHECK must run then.
need_working() {
  local what=$1 check=$2 out; shift 2
  out=$("$check" 2>&1) && return 0
  if [ $? = 127 ] && ! command -v "$what" >/dev/null; then   # (timeout's, the shell's: "no such command")
    apt_install "there is no $what" "$@"
  else
    apt_install "$what does not run${out:+ ($(echo "$out" | tail -1 | cut -c1-120))}" "$@"
  fi
  out=$("$check" 2>&1) || cannot "$what still does not run after installing $*: $(echo "$out" | tail -1)"
}

chromium_renders() {   # as tests/browser starts it: headless, no sandbox (root), no calls home
  [ -x "$CHROMIUM" ] || return 127
  local profile; profile=$(mktemp -d)
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile" --dump-dom 'data:text/html,<p>works</p>' |
    grep -q works
  local rc=$?; rm -rf "$profile"; return $rc
}
tshark_runs() { timeout 60 tshark -v; }
npm_runs() { timeout 60 npm --version; }
qemu_runs() { timeout 60 qemu-system-x86_64 --version; }
debootstrap_runs() { timeout 60 debootstrap --version; }
cpio_runs() { timeout 60 cpio --version; }
depmod_runs() { timeout 60 depmod --version; }

need() {
  case "$1" in
    docker) need_docker ;;
    chromium) need_working "$CHROMIUM" chromium_renders chromium ;;
    tshark)
      command -v debconf-set-selections >/dev/null &&
        echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null
      need_working tshark tshark_runs tshark ;;
    npm) need_working npm npm_runs nodejs npm ;;
    debootstrap) need_working debootstrap debootstrap_runs debootstrap ;;
    guest)
      need_working qemu-system-x86_64 qemu_runs qemu-system-x86
      need_working debootstrap debootstrap_runs debootstrap
      need_working cpio cpio_runs cpio
      need_working depmod depmod_runs kmod ;;
    *) cannot "no step '$1': the steps are docker, chromium, tshark, npm, debootstrap, guest (and --report)" ;;
  esac
}

report() {
  first() {   # a tool's first line about itself, or "none" (never two lines: the table stays a table)
    command -v "$1" >/dev/null 2>&1 || { echo none; return; }
    local said; said=$("$@" 2>/dev/null | head -1 | cut -c1-100); echo "${said:-none}"
  }
  echo "what this machine has now (installed and started by this run: $LEDGER):"
  if [ -s "$LEDGER" ]; then sed 's/^/  + /' "$LEDGER"; else echo "  + nothing"; fi
  printf '  %-20s %s\n' \
    "docker engine" "$(engine_answers && timeout 30 "$DOCKER" info -f '{{.ServerVersion}} ({{.Driver}})' 2>/dev/null || echo "none answers")" \
    "docker client" "$(first "$DOCKER" --version) ($(command -v "$DOCKER" || echo -))" \
    chromium "$(first "$CHROMIUM" --version)" \
    tshark "$(first tshark -v)" \
    node/npm "$(first node --version) / $(first npm --version)" \
    qemu "$(first qemu-system-x86_64 --version)" \
    debootstrap "$(first debootstrap --version)"
}

[ $# -gt 0 ] || { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
if [ "$1" = --report ]; then report; exit 0; fi
for step in "$@"; do need "$step"; done
