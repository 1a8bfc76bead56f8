#!/usr/bin/env bash
# Build a small signed apt repository (a "fake Deadsnakes") for image tests.
#
# Usage: ci/make-apt-repo.sh [--selftest] OUT_DIR KEY_DIR [CODENAME]
#   OUT_DIR   repository root (created): pool/main/*.deb, dists/CODENAME/
#             {Release,InRelease,Release.gpg,main/binary-ARCH/Packages{,.gz}}.
#             Use as: deb [signed-by=KEYRING] http://127.0.0.1:PORT/ CODENAME main
#   KEY_DIR   GNUPGHOME (created, mode 700). A fresh ed25519 signing key without
#             passphrase is generated on first use and reused afterwards; the
#             public key is (re)exported as KEY_DIR/archive-key.asc (armored)
#             and KEY_DIR/archive-key.gpg (binary, usable as signed-by keyring);
#             the armored key is also copied to OUT_DIR/archive-key.asc.
#   CODENAME  suite/codename written into Release (default: bookworm)
#   --selftest  afterwards serve OUT_DIR with ci/serve-dir.sh on a free port and
#             prove the path with DOCKER_BUILDKIT=1 docker build --network host:
#             fetch the key, check its fingerprint with gpg, install python3.11
#             from this repo only (Debian sources disabled), run it; then check
#             that a wrong expected fingerprint fails the build. One line on
#             stderr; CI_SELFTEST_LOG_DIR=DIR keeps the Dockerfile and build logs.
# Output: the key's fingerprint (40 uppercase hex) as the last line of stdout.
#
# Contents: $CI_APT_REPO_PACKAGES (default: python3.11 python3.11-minimal
# libpython3.11-minimal libpython3.11-stdlib) plus their Depends/Pre-Depends
# that are NOT already installed in $CI_BASE_IMAGE (default
# debian:bookworm-slim). The closure is computed inside that image with
# `apt-get install --download-only --no-install-recommends` against its own
# (reachable) Debian mirror, so it is exactly what a `FROM base` build lacks.
# The .debs are cached in /var/cache/vllm-musa-ci/apt-repo-debs/ keyed by the
# base image's layers and the package list (delete that dir to refresh).
# Indexes are made with apt-ftparchive (apt-utils), signatures with gpg.
set -Eeuo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DOCKER=/usr/bin/docker
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: $me [--selftest] OUT_DIR KEY_DIR [CODENAME]"
selftest=0
[[ ${1:-} == --selftest ]] && { selftest=1; shift; }
(($# == 2 || $# == 3)) || die "$usage"
codename=${3:-bookworm}
[[ $codename =~ ^[a-z0-9][a-z0-9.-]*$ ]] || die "bad CODENAME '$codename'"
BASE_IMAGE=${CI_BASE_IMAGE:-debian:bookworm-slim}
read -r -a packages <<<"${CI_APT_REPO_PACKAGES:-python3.11 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib}"
((${#packages[@]})) || die "CI_APT_REPO_PACKAGES is empty"
arch=$(dpkg --print-architecture)
for t in gpg gpgconf apt-ftparchive; do
  command -v "$t" >/dev/null || die "$t missing: run ci/install-system-deps.sh"
done

mkdir -p "$1" "$2"
out=$(cd "$1" && pwd -P)
keydir=$(cd "$2" && pwd -P)
work=$(mktemp -d /tmp/ci-make-apt-repo.XXXXXX)
export GNUPGHOME=$keydir
cleanup() {
  gpgconf --kill gpg-agent >/dev/null 2>&1 || true   # no agent left per KEY_DIR
  [[ -n ${serve_port:-} ]] && "$here/serve-dir.sh" --stop "$serve_port" || true
  rm -rf "$work"
}
trap cleanup EXIT
log=$work/log

# ------------------------------------------------------------------ the key
chmod 700 "$keydir"
fpr_of_secret() {
  gpg --batch --with-colons --list-secret-keys 2>/dev/null |
    awk -F: '$1 == "sec" { s = 1; next } s && $1 == "fpr" { print $10; exit }'
}
fpr=$(fpr_of_secret)
if [[ -z $fpr ]]; then
  run gpg --batch --pinentry-mode loopback --passphrase '' \
    --quick-gen-key "vllm-musa CI fake archive ($codename) <ci-archive@vllm-musa.invalid>" ed25519 sign never
  fpr=$(fpr_of_secret)
fi
[[ $fpr =~ ^[0-9A-F]{40}$ ]] || die "could not get a 40-hex fingerprint from $keydir (got '$fpr')"
run gpg --batch --yes --armor --output "$keydir/archive-key.asc" --export "$fpr"
run gpg --batch --yes --output "$keydir/archive-key.gpg" --export "$fpr"

# ------------------------------------------------------------------ the debs
"$DOCKER" info >/dev/null 2>&1 || die "no Docker daemon answers: run ci/start-docker.sh first"
layers=$("$DOCKER" image inspect -f '{{range .RootFS.Layers}}{{.}} {{end}}' "$BASE_IMAGE" 2>/dev/null) ||
  die "base image $BASE_IMAGE not found: run ci/make-base-image.sh"
ckey=$(printf '%s\n' "$layers" "$arch" "${packages[@]}" v1 | sha256sum | cut -c1-16)
cache=/var/cache/vllm-musa-ci/apt-repo-debs/$ckey
mkdir -p "$cache"
exec 9>"$cache.lock"
flock 9
if [[ ! -f $cache/.complete ]]; then
  rm -rf "${cache:?}"/*
  # Depends closure of what the base image lacks, plus the named packages
  # themselves (apt-get download) in case one is already installed there.
  if ! "$DOCKER" run --rm --network host -v "$cache:/debs" -e PKGS="${packages[*]}" "$BASE_IMAGE" bash -ec '
      apt-get update -qq
      apt-get install -y -qq --download-only --no-install-recommends \
        -o Dir::Cache::archives=/debs -o APT::Sandbox::User=root $PKGS >/dev/null
      cd /debs && apt-get download -qq -o APT::Sandbox::User=root $PKGS
      rm -rf /debs/partial /debs/lock' >"$work/closure.log" 2>&1; then
    printf '%s: error: computing/downloading the closure of %s inside %s failed\n--- output ---\n' \
      "$me" "${packages[*]}" "$BASE_IMAGE" >&2
    tail -n 40 "$work/closure.log" >&2
    rm -rf "$cache"
    exit 1
  fi
  for p in "${packages[@]}"; do
    compgen -G "$cache/${p}_*.deb" >/dev/null || die "no .deb for requested package $p in the closure"
  done
  touch "$cache/.complete"
fi
exec 9>&-

# ------------------------------------------------------------------ the repo
rm -rf "$out/pool/main" "$out/dists/$codename"
mkdir -p "$out/pool/main" "$out/dists/$codename/main/binary-$arch"
cp -l "$cache"/*.deb "$out/pool/main/" 2>/dev/null || cp "$cache"/*.deb "$out/pool/main/"
pk=$out/dists/$codename/main/binary-$arch/Packages
(cd "$out" && apt-ftparchive packages pool/main >"$pk") 2>>"$log" || die "apt-ftparchive packages failed: $(tail -n 5 "$log")"
for p in "${packages[@]}"; do
  grep -qx "Package: $p" "$pk" || die "Packages index lacks $p"
done
gzip -9nk "$pk"
apt-ftparchive \
  -o APT::FTPArchive::Release::Origin=vllm-musa-ci \
  -o APT::FTPArchive::Release::Label=vllm-musa-ci-fake-deadsnakes \
  -o APT::FTPArchive::Release::Suite="$codename" \
  -o APT::FTPArchive::Release::Codename="$codename" \
  -o APT::FTPArchive::Release::Architectures="$arch" \
  -o APT::FTPArchive::Release::Components=main \
  -o APT::FTPArchive::Release::Description="vllm-musa CI test repository" \
  release "$out/dists/$codename" >"$work/Release" 2>>"$log" || die "apt-ftparchive release failed: $(tail -n 5 "$log")"
mv "$work/Release" "$out/dists/$codename/Release"
run gpg --batch --yes --local-user "$fpr" --digest-algo SHA512 --clearsign \
  --output "$out/dists/$codename/InRelease" "$out/dists/$codename/Release"
run gpg --batch --yes --local-user "$fpr" --digest-algo SHA512 --armor --detach-sign \
  --output "$out/dists/$codename/Release.gpg" "$out/dists/$codename/Release"
run gpgv --keyring "$keydir/archive-key.gpg" "$out/dists/$codename/InRelease"
cp "$keydir/archive-key.asc" "$out/archive-key.asc"   # served next to the repo

# ------------------------------------------------------------------ selftest
if ((selftest)); then
  serve_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$here/serve-dir.sh" "$out" "$serve_port" >/dev/null
  url=http://127.0.0.1:$serve_port
  ctx=$work/ctx
  mkdir -p "$ctx"
  # No "# syntax=" line: that would try to pull a frontend image.
  cat >"$ctx/Dockerfile" <<'DOCKERFILE'
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS key
ARG KEY_URL
ARG KEY_FPR
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gpg >/dev/null
RUN /usr/lib/apt/apt-helper download-file "$KEY_URL" /tmp/key.asc \
 && gpg --batch --show-keys --with-colons /tmp/key.asc > /tmp/key.colons \
 && n=$(grep -c '^pub:' /tmp/key.colons) && [ "$n" = 1 ] \
 && got=$(awk -F: '$1 == "pub" { p = 1; next } p && $1 == "fpr" { print $10; exit }' /tmp/key.colons) \
 && want=$(echo "$KEY_FPR" | tr -d ' ' | tr a-f A-F) \
 && if [ "$got" != "$want" ]; then echo "FINGERPRINT MISMATCH: key has $got, expected $want" >&2; exit 1; fi \
 && gpg --batch --dearmor < /tmp/key.asc > /usr/share/keyrings/x.gpg \
 && echo "fingerprint ok: $got"

FROM ${BASE_IMAGE}
ARG REPO_URL
ARG CODENAME
COPY --from=key /usr/share/keyrings/x.gpg /usr/share/keyrings/x.gpg
RUN echo "deb [signed-by=/usr/share/keyrings/x.gpg] $REPO_URL $CODENAME main" > /etc/apt/sources.list.d/x.list \
 && mv /etc/apt/sources.list /etc/apt/sources.list.debian-disabled \
 && apt-get update \
 && apt-get install -y python3.11 \
 && apt-cache policy python3.11 \
 && python3.11 -c 'import sys; print("PYTHON-OK", sys.version)'
DOCKERFILE
  build() { # build EXPECTED_FPR LOGFILE
    DOCKER_BUILDKIT=1 "$DOCKER" build --network host --no-cache --progress=plain \
      --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg KEY_URL="$url/archive-key.asc" \
      --build-arg KEY_FPR="$1" --build-arg REPO_URL="$url/" --build-arg CODENAME="$codename" \
      "$ctx" >"$2" 2>&1
  }
  if ! build "$fpr" "$work/good.log"; then
    printf '%s: error: selftest build with the right fingerprint failed\n--- output ---\n' "$me" >&2
    tail -n 40 "$work/good.log" >&2
    exit 1
  fi
  grep -q "$url/ $codename" "$work/good.log" || die "selftest: python3.11 was not taken from $url"
  pyver=$(grep -o 'PYTHON-OK .*' "$work/good.log" | head -n1) || die "selftest: no PYTHON-OK line"
  wrong=$(printf '%s' "$fpr" | tr 0-9A-F 1-9A-F0)   # every hex digit changed
  if build "$wrong" "$work/bad.log"; then
    die "selftest: the build with a wrong fingerprint ($wrong) succeeded"
  fi
  grep -q 'FINGERPRINT MISMATCH' "$work/bad.log" ||
    { tail -n 30 "$work/bad.log" >&2; die "selftest: the wrong-fingerprint build failed, but not on the fingerprint check"; }
  if [[ -n ${CI_SELFTEST_LOG_DIR:-} ]]; then
    mkdir -p "$CI_SELFTEST_LOG_DIR" && cp "$ctx/Dockerfile" "$work/good.log" "$work/bad.log" "$CI_SELFTEST_LOG_DIR/"
  fi
  printf '%s: selftest ok: %s (via %s); wrong fingerprint rejected\n' "$me" "$pyver" "$url" >&2
fi

echo "$fpr"
