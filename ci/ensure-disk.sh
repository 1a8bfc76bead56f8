#!/usr/bin/env bash
# Make sure the disk that holds Docker's data has room for the test suite.
#
# Usage: ci/ensure-disk.sh [NEEDED_GB]   (default 20)
#   Prints one line with the free space under Docker's data root. When it is
#   below NEEDED_GB, removes what earlier test runs left behind and nothing
#   else: images whose repository starts with vllm-musa-test or vllm-musa-demo,
#   and BuildKit's build cache down to its most recently used
#   CI_KEEP_BUILD_CACHE_GB (default 10: what one run's builds reuse, so the
#   next run finds its layers cached), then all of it when that is not enough.
#   Fails, naming the path and the numbers, when that still does not free enough.
# A full `make test` writes builds, a second daemon's data root and saved layouts,
# and removes most of it again; what stays is BuildKit's cache. Measured on a warm
# machine: a run that began with 37 GB free ended with 21 GB free, and the next,
# begun with those 21 GB, ran out of space loading the demo into the second
# daemon; CI asks for 30. A machine that ran the suite many times keeps the
# build cache and the test images, which is what this clears.
set -Eeuo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

needed_gb=${1:-20}
docker=/usr/bin/docker
root=$("$docker" info --format '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)
[ -d "$root" ] || root=/

free_gb() { df -P -BG "$root" | awk 'NR==2 {sub(/G$/, "", $4); print $4}'; }

free=$(free_gb)
echo "disk: ${free} GB free under $root (the tests need ${needed_gb} GB)"
[ "$free" -ge "$needed_gb" ] && exit 0

keep_gb=${CI_KEEP_BUILD_CACHE_GB:-10}
echo "disk: clearing the images earlier test runs left and the build cache beyond its newest ${keep_gb} GB"
"$docker" images --format '{{.Repository}} {{.ID}}' \
  | awk '$1 ~ /^vllm-musa-(test|demo)/ || $1 == "<none>" {print $2}' \
  | sort -u | xargs -r "$docker" rmi -f >/dev/null 2>&1 || true
"$docker" builder prune -af --keep-storage "${keep_gb}GB" >/dev/null 2>&1 || true
free=$(free_gb)
if [ "$free" -lt "$needed_gb" ]; then
  echo "disk: ${free} GB free under $root; clearing the whole build cache"
  "$docker" builder prune -af >/dev/null 2>&1 || true
  free=$(free_gb)
fi
echo "disk: ${free} GB free under $root"
[ "$free" -ge "$needed_gb" ] \
  || die "only ${free} GB free under $root; the tests need ${needed_gb} GB. Free space there (docker system df shows what Docker holds) or give the machine a larger disk."
