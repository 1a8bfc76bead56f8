#!/bin/sh
# check-installed.sh WHAT PACKAGE...: an --offline build runs no apt, so the apt packages a
# stage needs must already be in the base image; fail naming each one that is not.
set -eu
what=$1
shift
missing=""
for p in "$@"; do
    dpkg-query -W -f '${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "error[offline-missing]: apt package(s)$missing for $what are not in the base image;" \
         "an --offline build runs no apt: use a base image that has them" >&2
    exit 1
fi
