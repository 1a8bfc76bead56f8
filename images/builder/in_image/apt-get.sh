#!/bin/sh
# apt-get.sh ATTEMPTS MIRROR PROXY apt-get-args...: apt-get, run inside the image build.
#
# MIRROR ("" for none) replaces the URI of every base-distribution source that is not a
# security archive, for this call only (a temporary source list; the image's own
# /etc/apt/sources.list* stay as the base has them). PROXY ("" for none) is the one proxy
# used, on purpose; with none, apt goes DIRECT whatever proxy variables were inherited.
# A failing call is retried ATTEMPTS times with backoff (2, 4, 8... s), then fails naming
# the source URLs. `update` runs with --error-on=any so a failed index fetch is a failure.
set -eu
attempts=$1 mirror=$2 proxy=$3
shift 3
# MIRROR goes into a sed replacement below (where # ends it, & and \ are special and GNU
# sed's e flag runs a command): a plain URL only, checked here as in the manifest.
case "$mirror" in
    *[!A-Za-z0-9._~/%+=,:-]*)
        echo "error[apt-mirror]: the apt mirror $mirror is not a plain http(s) URL" >&2
        exit 1 ;;
    "" | http://?* | https://?*) ;;
    *)
        echo "error[apt-mirror]: the apt mirror $mirror is not a plain http(s) URL" >&2
        exit 1 ;;
esac
set -- -o Acquire::Retries=0 "$@"
if [ -n "$proxy" ]; then
    set -- -o "Acquire::http::Proxy=$proxy" -o "Acquire::https::Proxy=$proxy" "$@"
else
    set -- -o Acquire::http::Proxy=DIRECT -o Acquire::https::Proxy=DIRECT "$@"
fi
lists=/etc/apt/sources.list
parts=/etc/apt/sources.list.d
if [ -n "$mirror" ]; then
    tmp=$(mktemp -d)
    mkdir "$tmp/parts"
    : > "$tmp/sources.list"
    if [ -f "$lists" ]; then
        sed -E "/security/! s#^(deb(-src)?( \[[^]]*\])?)[[:space:]]+[a-z]+://[^[:space:]]+#\1 $mirror#" \
            "$lists" > "$tmp/sources.list"
    fi
    for f in "$parts"/*.list "$parts"/*.sources; do
        [ -e "$f" ] || continue
        case "$(basename "$f")" in
            deadsnakes.list | vendor-*.list) cp "$f" "$tmp/parts/" ;;
            *.sources) sed -E "/security/! s#^URIs:.*#URIs: $mirror#" "$f" > "$tmp/parts/$(basename "$f")" ;;
            *) sed -E "/security/! s#^(deb(-src)?( \[[^]]*\])?)[[:space:]]+[a-z]+://[^[:space:]]+#\1 $mirror#" \
                   "$f" > "$tmp/parts/$(basename "$f")" ;;
        esac
    done
    lists=$tmp/sources.list
    parts=$tmp/parts
    set -- -o "Dir::Etc::SourceList=$lists" -o "Dir::Etc::SourceParts=$parts" "$@"
fi
is_update=0
for a in "$@"; do [ "$a" = update ] && is_update=1; done
if [ "$is_update" = 1 ]; then set -- "$@" --error-on=any; fi
n=1
while :; do
    if DEBIAN_FRONTEND=noninteractive apt-get "$@"; then exit 0; fi
    if [ "$n" -ge "$attempts" ]; then
        urls=$(cat "$lists" "$parts"/* 2>/dev/null \
               | sed -nE 's#^(deb(-src)?( \[[^]]*\])?)[[:space:]]+([a-z]+://[^[:space:]]+).*#\4#p; s#^URIs:[[:space:]]*##p' \
               | sort -u | tr '\n' ' ')
        echo "error[apt-failed]: apt-get $* failed $attempts time(s); sources: $urls" >&2
        exit 1
    fi
    sleep $((n * 2))
    n=$((n + 1))
done
