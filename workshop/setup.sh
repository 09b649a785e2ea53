#!/usr/bin/env bash
# One command for a class on a fresh Debian or Ubuntu server (root):
#   sudo workshop/setup.sh --learners 20 [--instructor alice] [--port 8000] [--shm 512M] [--memory 2G] [--cpus 1]
# installs the lab into PREFIX (default /opt/rdmalab: src/, venv/ shared read-only, node_modules/ with
# configurable-http-proxy), creates the learners (learner01.. in group rdmalab-class, passwords in
# /root/rdmalab-class-passwords.txt), the class directory for the instructor's view, /etc/rdmalab-hub.env,
# and starts JupyterHub (a systemd service where systemd runs; otherwise it prints the command).
# Running it again keeps existing learners and their work, and updates the lab. workshop/README.md says more.
set -euo pipefail

LEARNERS=0 PREFIX=/opt/rdmalab PORT=8000 SHM=512M MEMORY=2G CPUS=1 INSTRUCTOR="" CLASS_DIR=/srv/rdmalab-class
while [ $# -gt 0 ]; do
  case "$1" in
    --learners) LEARNERS=$2; shift 2 ;;
    --instructor) INSTRUCTOR=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --shm) SHM=$2; shift 2 ;;
    --memory) MEMORY=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --class-dir) CLASS_DIR=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "setup.sh: run it as root (sudo): it installs packages and creates users" >&2; exit 1; }
SRC=$(cd "$(dirname "$0")/.." && pwd)

echo "== packages: python3, venv, nodejs, npm"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends python3 python3-venv python3-dev gcc nodejs npm passwd util-linux rsync

echo "== the lab in $PREFIX (read-only for learners)"
mkdir -p "$PREFIX"
rsync -a --delete --exclude .git --exclude .venv --exclude '*.egg-info' --exclude build "$SRC/" "$PREFIX/src/"
[ -x "$PREFIX/venv/bin/python" ] || python3 -m venv "$PREFIX/venv"
"$PREFIX/venv/bin/python" -m pip install --quiet --upgrade pip
"$PREFIX/venv/bin/python" -m pip install --quiet "$PREFIX/src[workshop]"
npm install --silent --no-audit --no-fund --prefix "$PREFIX" configurable-http-proxy@5
chown -R root:root "$PREFIX"
chmod -R u+rwX,go+rX,go-w "$PREFIX"

echo "== learners"
getent group rdmalab-class >/dev/null || groupadd rdmalab-class
PASSWORDS=/root/rdmalab-class-passwords.txt
touch "$PASSWORDS" && chmod 600 "$PASSWORDS"
for i in $(seq 1 "$LEARNERS"); do
  name=$(printf "learner%02d" "$i")
  if ! id "$name" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash --groups rdmalab-class "$name"
    password=$(python3 -c "import secrets; print(secrets.token_urlsafe(9))")
    echo "$name:$password" | chpasswd
    echo "$name $password" >> "$PASSWORDS"
  fi
done
if [ -n "$INSTRUCTOR" ]; then
  id "$INSTRUCTOR" >/dev/null 2>&1 || { useradd --create-home --shell /bin/bash "$INSTRUCTOR"; \
    echo "setup.sh: created $INSTRUCTOR: give them a password with: passwd $INSTRUCTOR"; }
  usermod -aG rdmalab-class "$INSTRUCTOR"
fi

echo "== the class directory (instructor's view): $CLASS_DIR"
mkdir -p "$CLASS_DIR"
chown "${INSTRUCTOR:-root}:rdmalab-class" "$CLASS_DIR"
chmod 1733 "$CLASS_DIR"   # learners create their own file; cannot list, delete or replace others'

cat > /etc/rdmalab-hub.env <<EOF
RDMALAB_CLASS_PREFIX=$PREFIX
RDMALAB_CLASS_VENV=$PREFIX/venv
RDMALAB_CLASS_LESSONS=$PREFIX/src/notebooks
RDMALAB_CLASS_PROXY=$PREFIX/node_modules/.bin/configurable-http-proxy
RDMALAB_CLASS_STATE=/var/lib/rdmalab-hub
RDMALAB_CLASS_DIR=$CLASS_DIR
RDMALAB_CLASS_SHM=$SHM
RDMALAB_CLASS_MEMORY=$MEMORY
RDMALAB_CLASS_CPUS=$CPUS
RDMALAB_CLASS_ADMINS=$INSTRUCTOR
RDMALAB_HUB_URL=http://0.0.0.0:$PORT
EOF
mkdir -p /var/lib/rdmalab-hub && chmod 700 /var/lib/rdmalab-hub
HUB="$PREFIX/venv/bin/jupyterhub -f $PREFIX/src/workshop/jupyterhub_config.py"

if [ -d /run/systemd/system ]; then
  cat > /etc/systemd/system/rdmalab-hub.service <<EOF
[Unit]
Description=JupyterHub for the rdmalab class
After=network.target

[Service]
EnvironmentFile=/etc/rdmalab-hub.env
WorkingDirectory=/var/lib/rdmalab-hub
ExecStart=$HUB
# the hub puts each learner's server in a cgroup of its own (rdmalab-class/<user>) and cleans it up
Delegate=yes
KillMode=mixed
Restart=on-failure

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
  systemctl enable --now rdmalab-hub.service
  systemctl restart rdmalab-hub.service
  echo "== JupyterHub runs: systemctl status rdmalab-hub; logs: journalctl -u rdmalab-hub"
else
  echo "== no systemd here: start the hub with"
  echo "   set -a; . /etc/rdmalab-hub.env; set +a; cd /var/lib/rdmalab-hub && $HUB"
fi
echo "== learners log in at http://$(hostname -f 2>/dev/null || hostname):$PORT with the names and passwords in $PASSWORDS"
echo "   the class at a glance: $PREFIX/venv/bin/rdmalab class report $CLASS_DIR"
