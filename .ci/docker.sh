#!/usr/bin/env bash
# Make a Docker engine answer on this machine: install Debian's docker.io (and debootstrap, used by
# `rlloop sandbox build --offline`) when dockerd is missing, start dockerd in the background when
# `docker info` fails, and wait until it answers. Idempotent; meant for root on a fresh CI machine.
set -euo pipefail

LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
WAIT_S="${DOCKERD_WAIT_S:-60}"

say() { echo "[docker.sh] $*"; }
die() { echo "[docker.sh] error: $*" >&2; exit 1; }

if docker info >/dev/null 2>&1; then
  say "docker engine already answers; nothing to do"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  die "docker engine not reachable and not root: start dockerd yourself or run this script as root"
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed: check the network or the Debian mirror"
  apt-get install -y -qq "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
fi

# A stale pid file from a dockerd that died keeps a new one from starting.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
  rm -f /var/run/docker.pid
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  # overlay2 needs a real filesystem under /var/lib/docker; fall back to vfs where overlay mounts fail
  # (e.g. /var/lib/docker itself on overlayfs inside a container).
  driver="${DOCKER_STORAGE_DRIVER:-}"
  if [ -z "$driver" ]; then
    fstype="$(stat -f -c %T /var/lib/docker 2>/dev/null || stat -f -c %T /var/lib)"
    if [ "$fstype" = overlayfs ]; then driver=vfs; else driver=overlay2; fi
  fi
  say "starting dockerd (storage driver $driver), log in $LOG"
  mkdir -p "$(dirname "$LOG")"
  nohup dockerd --storage-driver="$driver" >>"$LOG" 2>&1 </dev/null &
  disown || true
fi

for _ in $(seq 1 "$WAIT_S"); do
  if docker info >/dev/null 2>&1; then
    say "docker engine ready: $(docker version --format '{{.Server.Version}}' 2>/dev/null) \
($(docker info --format '{{.Driver}}, cgroup {{.CgroupVersion}}' 2>/dev/null))"
    exit 0
  fi
  sleep 1
done
tail -n 20 "$LOG" >&2 || true
die "dockerd did not answer within ${WAIT_S}s; see $LOG (last lines above)"
