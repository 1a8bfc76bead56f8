#!/usr/bin/env bash
# Install the Debian packages the CI tests need (Docker daemon, registry, skopeo,
# debootstrap, apt repository tools, gpg, ...). Idempotent: packages that dpkg
# already reports as installed are skipped, and when nothing is missing apt is
# not touched at all (a warm run takes well under a second). Debian 12 (bookworm) and 13
# (trixie): every name below exists on both.
#
# Usage: ci/install-system-deps.sh            (as root; no arguments)
# Env:   CI_EXTRA_PACKAGES="pkg ..."           extra packages to ensure
set -Eeuo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# What each package is for:
#   docker.io        dockerd, and on bookworm /usr/bin/docker (BuildKit built in; NOT
#                    /usr/local/bin/docker); from trixie on: docker-cli + docker-buildx
#   skopeo           inspect/copy images in the local registry
#   docker-registry  /usr/bin/docker-registry (distribution 2.8) for 127.0.0.1:5000/5001
#   apache2-utils    htpasswd -B (bcrypt) for the auth-protected registry on :5001
#   debootstrap      builds the debian:bookworm-slim stand-in base image
#   apt-utils        apt-ftparchive, used to index the signed fake-Deadsnakes repo
#   gnupg            key generation and Release signing
#   curl             readiness probes
#   nginx            available to tests that need a real web server
#   ccache git ca-certificates make  build/test tooling
#   python3-venv     `make dev`'s venv for the release's python3 (3.11 on Debian 12, 3.13 on 13)
#   g++ python3-dev ninja-build  the cxx-extension gate's tests compile against this Python.h
#   cargo            `fetch` vendors the vllm-rs crates on the host (cargo vendor)
#   iproute2         the bridge of the second Docker daemon a reproducibility test starts
packages=(
  docker.io skopeo docker-registry apache2-utils debootstrap apt-utils gnupg
  curl nginx ccache git ca-certificates make python3-venv g++ python3-dev ninja-build
  cargo iproute2
)
# bookworm's docker.io 20.10 holds the CLI, BuildKit built in; trixie's docker.io 26 only
# recommends docker-cli, whose `DOCKER_BUILDKIT=1 docker build` needs docker-buildx.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ $codename == bookworm ]] || packages+=(docker-cli docker-buildx)
# shellcheck disable=SC2206
packages+=(${CI_EXTRA_PACKAGES:-})

[[ $(id -u) -eq 0 ]] || die "must run as root"

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

log=$(mktemp /tmp/ci-install-system-deps.XXXXXX.log)
# run, as ci/lib.sh has it, but naming the log: this one is kept
run() {
  if ! "$@" >>"$log" 2>&1; then
    printf '%s: error: command failed: %s\n--- last 40 lines of %s ---\n' "$me" "$*" "$log" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
export DEBIAN_FRONTEND=noninteractive
run apt-get update -q
run apt-get install -y -q --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"

# Re-check: apt can exit 0 while a package ends up half-configured.
still=()
for p in "${missing[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || still+=("$p")
done
((${#still[@]} == 0)) || die "still not installed after apt-get install: ${still[*]} (log: $log)"
[[ -x /usr/bin/docker ]] || die "/usr/bin/docker missing although docker.io is installed"
rm -f "$log"
