#!/bin/sh
# apt-fetch.sh ATTEMPTS MIRROR PROXY: run by `build_image.py fetch` in a container of the base
# image, with network. Reads /tmp/plan/plan (images/builder/apt_plan.py render_fetch_plan):
#   source LEVEL LIST_NAME KEY_FILE URL SUITE COMPONENT   (SUITE "-": the base's codename)
#   step NAME LEVEL PACKAGE...
# Level by level (the sources a stage sees: 0 the base's own, 1 + the vendor SDK repository,
# 2 + Deadsnakes), it adds that level's sources (signed-by /tmp/plan/keys/KEY_FILE, checked on
# the host against the manifest's fingerprint), runs `apt-get update`, then for each step
# writes /out/NAME.uris (apt-get --print-uris: every file the step installs on the base, with
# the hash from the signed index) and downloads those files into /out/debs/.
# apt runs through apt-get.sh: the apt mirror, the one proxy, bounded retries.
set -eu
attempts=$1 mirror=$2 proxy=$3
plan=/tmp/plan/plan
apt() { sh /tmp/tools/apt-get.sh "$attempts" "$mirror" "$proxy" -o APT::Sandbox::User=root "$@"; }
. /etc/os-release
mkdir -p /out/debs/partial /tmp/empty/partial /etc/apt/keyrings
max=$(awk '$1 == "source" { print $2 } $1 == "step" { print $3 }' "$plan" | sort -n | tail -n 1)
level=0
while [ "$level" -le "${max:-0}" ]; do
    awk -v l="$level" '$1 == "source" && $2 == l' "$plan" > /tmp/sources
    while read -r _ _ list key url suite component; do
        [ "$suite" = - ] && suite=$VERSION_CODENAME
        cp "/tmp/plan/keys/$key" "/etc/apt/keyrings/$key"
        echo "deb [signed-by=/etc/apt/keyrings/$key] $url $suite $component" \
            > "/etc/apt/sources.list.d/$list"
    done < /tmp/sources
    if [ "$level" = 0 ] || [ -s /tmp/sources ]; then
        apt update
    fi
    awk -v l="$level" '$1 == "step" && $3 == l' "$plan" > /tmp/steps
    while read -r _ name _ packages; do
        # shellcheck disable=SC2086 # a list of package names
        apt install -y -qq --no-install-recommends --print-uris \
            -o Dir::Cache::archives=/tmp/empty/ $packages > "/out/$name.uris" < /dev/null
        # shellcheck disable=SC2086
        apt install -y -qq --no-install-recommends --download-only \
            -o Dir::Cache::archives=/out/debs/ $packages < /dev/null
    done < /tmp/steps
    level=$((level + 1))
done
rm -rf /out/debs/partial /out/debs/lock
