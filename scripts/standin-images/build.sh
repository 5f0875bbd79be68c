#!/usr/bin/env bash
# Build local stand-ins for the three base images docker-compose.yml names (python:3.11-slim,
# postgres:16, redis:7) from Debian packages, for a machine that reaches no container registry.
# Not needed on a normal machine: `docker compose` pulls the real images. See scripts/README.md.
#
#   sudo scripts/standin-images/build.sh          # podman (or docker) as root; needs debootstrap
#
# One debootstrap'd Debian bookworm root filesystem holds python3.11, PostgreSQL and Redis; it is
# imported once as a base image and each stand-in is a thin image over it with the official image's
# entry point behaviour that the compose file relies on.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${ASSAY_STANDIN_DIR:-/var/tmp/assay-standin}"
MIRROR="${ASSAY_STANDIN_MIRROR:-http://deb.debian.org/debian}"
BASE="localhost/assay-standin-base:bookworm"
if command -v podman >/dev/null 2>&1; then ENGINE=podman; else ENGINE=docker; fi

say() { printf '\n== %s\n' "$*"; }

# podman's default open-file and process limits for containers are above this machine's hard limits
# (runc then fails: "error setting rlimit type 7 / 6: operation not permitted"): cap open files at the
# hard limit and processes at 32768 (runc here refused more, even the shell's hard limit of 96364).
if [ "$ENGINE" = podman ] && ! grep -qs '^default_ulimits' /etc/containers/containers.conf; then
  nofile="$(ulimit -Hn)"; nproc="$(ulimit -Hu)"
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
  [ "$nofile" = unlimited ] && nofile=1048576
  say "podman: container ulimits nofile=$nofile nproc=$nproc (/etc/containers/containers.conf)"
  mkdir -p /etc/containers
  cat >>/etc/containers/containers.conf <<CONF
# Added by assay scripts/standin-images/build.sh: container limits within this machine's hard limits.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
CONF
fi

# crun, podman's default runtime on Debian, cannot run containers on a host whose cgroups are in hybrid
# mode (v1 controllers plus a v2 tree at /sys/fs/cgroup/unified): "cgroups in hybrid mode not supported,
# drop all controllers from cgroupv2". runc can: make it podman's runtime there.
if [ "$ENGINE" = podman ] && grep -qs ' /sys/fs/cgroup/unified cgroup2 ' /proc/mounts \
  && ! grep -qs '^runtime' /etc/containers/containers.conf; then
  command -v runc >/dev/null 2>&1 || { echo "this host's cgroups are in hybrid mode, where podman needs runc: apt-get install runc" >&2; exit 1; }
  say "podman: runtime runc (hybrid cgroups; /etc/containers/containers.conf)"
  mkdir -p /etc/containers
  cat >>/etc/containers/containers.conf <<CONF
# Added by assay scripts/standin-images/build.sh: crun does not support this host's hybrid cgroups.
[engine]
runtime = "runc"
CONF
fi

if ! "$ENGINE" image exists "$BASE" 2>/dev/null && ! "$ENGINE" image inspect "$BASE" >/dev/null 2>&1; then
  mkdir -p "$WORK"
  if [ ! -x "$WORK/rootfs/usr/bin/python3.11" ]; then
    say "debootstrap bookworm into $WORK/rootfs (a few minutes)"
    rm -rf "$WORK/rootfs"
    # debootstrap resolves dependencies on real packages only, not on virtual ones: python3.11-venv
    # depends on python3.11-distutils, which only python3-distutils provides, so that one is named here
    # (without it dpkg stops: "python3.11-distutils is not installed").
    debootstrap --variant=minbase \
      --include=ca-certificates,python3.11,python3.11-venv,python3-distutils,postgresql-15,postgresql-client-15,redis-server,redis-tools,procps \
      bookworm "$WORK/rootfs" "$MIRROR"
  fi
  say "prepare the root filesystem"
  R="$WORK/rootfs"
  # This machine's HTTPS goes through a proxy with its own CA: pip inside `docker build` must trust it.
  # The host's bundle replaces the image's (it holds the public CAs too).
  cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
  # python:3.11-slim's layout: python, pip and console scripts in /usr/local/bin (a venv at /usr/local).
  [ -x "$R/usr/local/bin/pip" ] || chroot "$R" /usr/bin/python3.11 -m venv /usr/local
  # The package's postinst made a cluster the stand-in does not use (its entry point makes its own).
  rm -rf "$R/var/lib/postgresql/15" "$R/etc/postgresql/15"
  rm -rf "$R/var/cache/apt/archives/"*.deb "$R/var/lib/apt/lists/"*
  say "import $BASE"
  tar -C "$R" -c . | "$ENGINE" import - "$BASE"
fi

for spec in "python:docker.io/library/python:3.11-slim" "postgres:docker.io/library/postgres:16" "redis:docker.io/library/redis:7"; do
  dir="${spec%%:*}"
  tag="${spec#*:}"
  say "build $tag (stand-in, from $HERE/$dir)"
  "$ENGINE" build --network host -t "$tag" "$HERE/$dir"
done
say "stand-ins ready"
"$ENGINE" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'python|postgres|redis|standin'
