#!/usr/bin/env bash
# Create the base image the tests build FROM, without any container registry.
#
# Usage: ci/make-base-image.sh [TAG]        (default TAG: debian:bookworm-slim)
#   When TAG is already in the daemon, only drops the repository digests a push
#   of it by hand gave it (the tests expect an imported image). Otherwise debootstraps a
#   minbase Debian (suite: $CI_BASE_SUITE, default bookworm) from the apt mirror
#   this machine's own apt sources use (the only one reachable here), trims it
#   like the official "-slim" images, and `docker import`s it as TAG with
#   CMD ["bash"]. The trimmed rootfs tarball is cached in
#   /var/cache/vllm-musa-ci/base/, so later runs only import (a few seconds).
#   The new image is verified with `docker run --rm TAG apt-get update` before
#   TAG is set.
#
# The image's /etc/apt/sources.list lists <mirror> SUITE, SUITE-updates and
# <security mirror> SUITE-security (the latter two only when the host uses
# them); its apt.conf.d/docker-* and dpkg.cfg.d/docker files are those of the
# official Debian images (note docker-clean: a Dockerfile that wants an apt
# cache mount must `rm -f /etc/apt/apt.conf.d/docker-clean`, as upstream).
# Env: CI_BASE_SUITE, CI_DEBIAN_MIRROR / CI_DEBIAN_SECURITY_MIRROR (override the
#      mirrors read from the host's apt configuration).
set -Eeuo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DOCKER=/usr/bin/docker
TAG=${1:-debian:bookworm-slim}
(($# <= 1)) || die "usage: $me [TAG]"
SUITE=${CI_BASE_SUITE:-bookworm}
CACHE=/var/cache/vllm-musa-ci/base

[[ $(id -u) -eq 0 ]] || die "must run as root"
"$DOCKER" info >/dev/null 2>&1 || die "no Docker daemon answers: run ci/start-docker.sh first"
forget_digests() { # an imported image has no repository digest; a push of it by hand adds one
  local ref
  for ref in $("$DOCKER" image inspect --format '{{range .RepoDigests}}{{.}} {{end}}' "$TAG"); do
    "$DOCKER" rmi "$ref" >/dev/null
  done
}
if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then forget_digests; exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
"$DOCKER" image inspect "$TAG" >/dev/null 2>&1 && exit 0   # made while we waited

work=$(mktemp -d /var/tmp/ci-make-base-image.XXXXXX)
cleanup() {
  # never leave proc/sys mounted inside the chroot if debootstrap died midway
  grep -o " $work/[^ ]*" /proc/mounts 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
log=$work/log

# The host's apt mirrors (deb822 or one-line format, parsed by apt itself).
repo_for() { # repo_for SUITE-STRING -> URI of a "deb" source for it, if any
  apt-get indextargets --no-release-info --format '$(TARGET_OF) $(RELEASE) $(REPO_URI)' 2>/dev/null |
    awk -v s="$1" '$1 == "deb" && $2 == s { print $3; exit }'
}
mirror=${CI_DEBIAN_MIRROR:-$(repo_for "$SUITE")}
if [[ -z $mirror ]]; then
  mirror=http://deb.debian.org/debian
  printf '%s: warning: no "%s" source in the host apt configuration; using %s\n' "$me" "$SUITE" "$mirror" >&2
fi
mirror=${mirror%/}
updates=$(repo_for "$SUITE-updates"); updates=${updates%/}
security=${CI_DEBIAN_SECURITY_MIRROR:-$(repo_for "$SUITE-security")}; security=${security%/}

key=$(printf '%s\n' "$SUITE" "$mirror" "$updates" "$security" v1 | sha256sum | cut -c1-12)
tarball=$CACHE/$SUITE-minbase-slim-$key.tar

if [[ ! -s $tarball ]]; then
  root=$work/rootfs
  include=()
  [[ $mirror == https://* ]] && include=(--include=ca-certificates)
  run debootstrap --variant=minbase "${include[@]}" "$SUITE" "$root" "$mirror"

  {
    echo "deb $mirror $SUITE main"
    [[ -n $updates ]] && echo "deb $updates $SUITE-updates main"
    [[ -n $security ]] && echo "deb $security $SUITE-security main"
  } >"$root/etc/apt/sources.list"
  rm -f "$root"/etc/apt/sources.list.d/*

  # What the official Debian images (debuerreotype) ship, "slim" variant.
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'CONF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CONF
  echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Acquire::GzipIndexes "true";' >"$root/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$root/etc/apt/apt.conf.d/docker-autoremove-suggests"
  mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
  cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'CONF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
CONF
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "${root:?}"/usr/share/{groff,info,linda,locale,man}/* "${root:?}"/usr/share/lintian/overrides/*

  rm -rf "${root:?}"/var/lib/apt/lists/* "${root:?}"/var/cache/apt/*.bin \
    "${root:?}"/var/cache/apt/archives/*.deb "${root:?}"/var/cache/apt/archives/partial/* \
    "${root:?}"/var/cache/debconf/*-old "${root:?}"/var/lib/dpkg/*-old "${root:?}"/dev/* \
    "${root:?}"/var/log/bootstrap.log
  mkdir -p "$root/var/lib/apt/lists/partial"
  : >"$root/etc/resolv.conf"
  echo localhost >"$root/etc/hostname"
  : >"$root/etc/machine-id"
  if grep -q " $root/" /proc/mounts; then die "something is still mounted under $root"; fi

  run tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$root"
fi

tmptag=vllm-musa-ci/base-candidate:$key
run "$DOCKER" import --change 'CMD ["bash"]' "$tarball" "$tmptag"
if ! "$DOCKER" run --rm "$tmptag" apt-get update >"$work/update.log" 2>&1; then
  "$DOCKER" rmi "$tmptag" >/dev/null 2>&1 || true
  printf '%s: error: `docker run --rm <new image> apt-get update` failed (cached rootfs %s kept)\n--- output ---\n' "$me" "$tarball" >&2
  tail -n 40 "$work/update.log" >&2
  exit 1
fi
run "$DOCKER" tag "$tmptag" "$TAG"
run "$DOCKER" rmi "$tmptag"
