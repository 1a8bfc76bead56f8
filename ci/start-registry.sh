#!/usr/bin/env bash
# Run Debian's docker-registry (distribution 2.8) locally for push/pull tests.
#
# Usage: ci/start-registry.sh [--auth] [--check]
#   Always: an open registry on http://127.0.0.1:5000 (no auth, deletes enabled).
#   --auth: also an htpasswd-protected registry on http://127.0.0.1:5001, user
#           $CI_REGISTRY_AUTH_USER (default "ci"), password
#           $CI_REGISTRY_AUTH_PASSWORD (default "ci-password"). Any other
#           password gets HTTP 401. The bcrypt htpasswd entry comes from
#           `htpasswd -B` (apache2-utils), or Python's crypt module if absent.
#   --check: prove it works: push $CI_BASE_IMAGE (default debian:bookworm-slim)
#           as 127.0.0.1:5000/ci/base:test with /usr/bin/docker (127.0.0.0/8 is
#           an insecure registry by default, no daemon flag needed), and require
#           `skopeo inspect --tls-verify=false` to report the pushed digest; with
#           --auth, require 401 for a wrong password and a working skopeo copy
#           with the right one.
# An instance that already answers is left alone (a warm run takes ~50 ms).
# State: /var/lib/vllm-musa-ci/registry-PORT/ (config.yml, htpasswd, storage/),
#        logs /var/log/vllm-musa-ci-registry-PORT.log,
#        pids /run/vllm-musa-ci/registry-PORT.pid.
set -Eeuo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DOCKER=/usr/bin/docker
REGISTRY=/usr/bin/docker-registry
AUTH_USER=${CI_REGISTRY_AUTH_USER:-ci}
AUTH_PASSWORD=${CI_REGISTRY_AUTH_PASSWORD:-ci-password}
BASE_IMAGE=${CI_BASE_IMAGE:-debian:bookworm-slim}
want_auth=0 want_check=0
for a in "$@"; do
  case $a in
    --auth) want_auth=1 ;;
    --check) want_check=1 ;;
    *) die "usage: $me [--auth] [--check]" ;;
  esac
done
[[ $(id -u) -eq 0 ]] || die "must run as root"
[[ -x $REGISTRY ]] || die "$REGISTRY missing: run ci/install-system-deps.sh"
mkdir -p /run/vllm-musa-ci

status_of() { curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$1/v2/" 2>/dev/null || true; }

make_htpasswd() { # make_htpasswd FILE: (re)write it unless it already holds USER/PASSWORD
  local f=$1 line
  if [[ -s $f ]] && command -v htpasswd >/dev/null && htpasswd -vb "$f" "$AUTH_USER" "$AUTH_PASSWORD" >/dev/null 2>&1; then
    return 0
  fi
  if command -v htpasswd >/dev/null; then
    line=$(htpasswd -nbB "$AUTH_USER" "$AUTH_PASSWORD" | head -n1)
  else
    line=$(U=$AUTH_USER P=$AUTH_PASSWORD /usr/bin/python3 -W ignore -c \
      'import crypt, os; print(os.environ["U"] + ":" + crypt.crypt(os.environ["P"], crypt.mksalt(crypt.METHOD_BLOWFISH)))')
  fi
  [[ $line == "$AUTH_USER:\$2"* ]] || die "could not produce a bcrypt htpasswd entry (got: ${line%%:*}:...)"
  printf '%s\n' "$line" >"$f.tmp"
  chmod 600 "$f.tmp"
  mv "$f.tmp" "$f"   # the registry re-reads the file when its mtime changes
}

start_instance() { # start_instance PORT AUTH(0|1)
  local port=$1 auth=$2 dir=/var/lib/vllm-musa-ci/registry-$1 code i pid
  local log=/var/log/vllm-musa-ci-registry-$port.log pidfile=/run/vllm-musa-ci/registry-$port.pid
  local ready=200; ((auth)) && ready=401
  mkdir -p "$dir/storage"
  ((auth)) && make_htpasswd "$dir/htpasswd"
  code=$(status_of "$port")
  if [[ $code == "$ready" ]]; then return 0; fi
  [[ $code == 000 ]] || die "127.0.0.1:$port already answers /v2/ with HTTP $code (expected $ready): not our registry?"

  {
    cat <<YAML
version: 0.1
log:
  level: info
  fields:
    service: registry-$port
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  headers:
    X-Content-Type-Options: [nosniff]
YAML
    if ((auth)); then
      cat <<YAML
auth:
  htpasswd:
    realm: vllm-musa-ci
    path: $dir/htpasswd
YAML
    fi
  } >"$dir/config.yml"

  local off
  off=$(stat -c %s "$log" 2>/dev/null || echo 0)
  printf '=== %s %s: starting %s serve %s\n' "$(date -Is)" "$me" "$REGISTRY" "$dir/config.yml" >>"$log"
  setsid "$REGISTRY" serve "$dir/config.yml" >>"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$pidfile"
  for ((i = 0; i < 60; i++)); do
    [[ $(status_of "$port") == "$ready" ]] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.25
  done
  kill "$pid" 2>/dev/null || true
  printf '%s: error: registry on 127.0.0.1:%s did not answer /v2/ with HTTP %s within 15 s\n--- %s ---\n' \
    "$me" "$port" "$ready" "$log" >&2
  tail -c +"$((off + 1))" "$log" | tail -n 30 >&2
  exit 1
}

start_instance 5000 0
((want_auth)) && start_instance 5001 1
((want_check)) || exit 0

# ------------------------------------------------------------------ --check
work=$(mktemp -d /tmp/ci-start-registry.XXXXXX)
# shellcheck disable=SC2064
trap "rm -rf '$work'" EXIT
fail() { printf '%s: error: %s\n--- output ---\n' "$me" "$1" >&2; tail -n 30 "$2" >&2; exit 1; }
"$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1 || die "--check needs $BASE_IMAGE: run ci/make-base-image.sh"
ref=127.0.0.1:5000/ci/base:test
"$DOCKER" tag "$BASE_IMAGE" "$ref"
"$DOCKER" push "$ref" >"$work/push.log" 2>&1 || fail "docker push $ref failed" "$work/push.log"
pushed=$(grep -oE 'digest: sha256:[0-9a-f]{64}' "$work/push.log" | cut -d' ' -f2)
[[ -n $pushed ]] || fail "docker push printed no digest" "$work/push.log"
skopeo inspect --tls-verify=false --format '{{.Digest}}' "docker://$ref" >"$work/inspect.log" 2>&1 ||
  fail "skopeo inspect docker://$ref failed" "$work/inspect.log"
[[ $(cat "$work/inspect.log") == "$pushed" ]] ||
  die "skopeo sees $(cat "$work/inspect.log") but docker push reported $pushed"
hdr=$(curl -fsSI -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
  "http://127.0.0.1:5000/v2/ci/base/manifests/test" | tr -d '\r' | awk -F': ' 'tolower($1)=="docker-content-digest"{print $2}')
[[ $hdr == "$pushed" ]] || die "registry Docker-Content-Digest $hdr != pushed $pushed"
"$DOCKER" rmi "$ref" >/dev/null   # drop the local tag only; the registry keeps ci/base:test

if ((want_auth)); then
  [[ $(curl -s -o /dev/null -w '%{http_code}' -u "$AUTH_USER:$AUTH_PASSWORD" http://127.0.0.1:5001/v2/) == 200 ]] ||
    die "127.0.0.1:5001 rejects the right password"
  [[ $(curl -s -o /dev/null -w '%{http_code}' -u "$AUTH_USER:wrong-$AUTH_PASSWORD" http://127.0.0.1:5001/v2/) == 401 ]] ||
    die "127.0.0.1:5001 does not answer 401 to a wrong password"
  skopeo copy --quiet --src-tls-verify=false --dest-tls-verify=false --dest-creds "$AUTH_USER:$AUTH_PASSWORD" \
    "docker://$ref" docker://127.0.0.1:5001/ci/base:test >"$work/copy.log" 2>&1 ||
    fail "skopeo copy to the auth registry with the right password failed" "$work/copy.log"
  if skopeo inspect --tls-verify=false --creds "$AUTH_USER:wrong" docker://127.0.0.1:5001/ci/base:test >"$work/bad.log" 2>&1; then
    die "skopeo inspect on 127.0.0.1:5001 succeeded with a wrong password"
  fi
  grep -qiE 'unauthorized|401|authentication required' "$work/bad.log" ||
    fail "skopeo with a wrong password failed, but not with an auth error" "$work/bad.log"
fi
