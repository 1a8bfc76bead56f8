#!/bin/sh
# apt-offline.sh STEP WHAT PACKAGE...: one apt step of an --offline build (--network none).
#
# /tmp/apt/STEP.sha256 lists the .deb files `build_image.py fetch` downloaded for this step
# (apt checked their signatures then, signed-by the pinned keys); each must still have that
# sha256 (sha256sum -c) before apt installs it by path. No source is added, so nothing is
# trusted that apt did not verify. Then every PACKAGE must be installed (check-installed.sh).
set -eu
step=$1 what=$2
shift 2
list=/tmp/apt/$step.sha256
if [ ! -f "$list" ]; then
    echo "error[offline-missing]: no fetched .deb files for $what (apt step $step) in the" \
         "build context; run build_image.py fetch first" >&2
    exit 1
fi
if [ -s "$list" ]; then
    if ! (cd /tmp/apt/debs && sha256sum -c --quiet --strict "$list" >&2); then
        echo "error[apt-hash]: a .deb file for $what does not have the sha256 apt verified" \
             "when it was fetched; refusing to install it" >&2
        exit 1
    fi
    files=$(sed -E 's#^[0-9a-f]{64}  #/tmp/apt/debs/#' "$list")
    # shellcheck disable=SC2086 # one word per file name (names are checked on the host)
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        -o APT::Sandbox::User=root -o Acquire::http::Proxy=DIRECT $files
fi
sh /tmp/tools/check-installed.sh "$what" "$@"
