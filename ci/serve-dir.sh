#!/usr/bin/env bash
# Serve a directory over plain HTTP on 127.0.0.1 (e.g. the signed apt repository
# from ci/make-apt-repo.sh) with `python3 -m http.server`, in the background.
#
# Usage: ci/serve-dir.sh DIR PORT     start (or keep) serving DIR on 127.0.0.1:PORT;
#                                     prints the server's PID on stdout
#        ci/serve-dir.sh --stop PORT  stop the server this script started on PORT
# Idempotent: if our server already serves DIR on PORT it is left alone; if
# anything else holds PORT the script fails and says so. Pid file:
# /run/vllm-musa-ci/serve-PORT.pid, access log /var/log/vllm-musa-ci-serve-PORT.log.
#
# HOW A BUILD REACHES THIS SERVER (checked on Debian 12 with docker.io 20.10):
#   On the default bridge network 127.0.0.1 inside a container or RUN step is
#   the container's own loopback: connecting gives "Connection refused".
#   Use the host network for the build:
#       DOCKER_BUILDKIT=1 /usr/bin/docker build --network host ...
#   This works with the BuildKit built into dockerd 20.10 (no buildx, no
#   --allow network.host entitlement needed from this client) and with the
#   classic builder; `docker run --network host` likewise. RUN steps then still
#   reach the Debian mirror (the host's resolver and routes are used).
set -Eeuo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage="usage: $me DIR PORT | $me --stop PORT"
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3   # Debian's, not a pyenv shim
STATE=/run/vllm-musa-ci
if ! mkdir -p "$STATE" 2>/dev/null; then STATE=${TMPDIR:-/tmp}/vllm-musa-ci-run; mkdir -p "$STATE"; fi
LOGDIR=/var/log; [[ -w $LOGDIR ]] || LOGDIR=$STATE

valid_port() { [[ $1 =~ ^[0-9]+$ ]] && (($1 > 0 && $1 < 65536)) || die "bad PORT '$1'; $usage"; }
alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }
answers() { curl -s -o /dev/null -m 3 "http://127.0.0.1:$1/"; }

if [[ ${1:-} == --stop ]]; then
  (($# == 2)) || die "$usage"
  valid_port "$2"
  pidfile=$STATE/serve-$2.pid
  [[ -f $pidfile ]] || exit 0
  read -r pid _ <"$pidfile" || true
  if alive "$pid"; then
    kill "$pid"
    for ((i = 0; i < 20; i++)); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
  exit 0
fi

(($# == 2)) || die "$usage"
[[ -d $1 ]] || die "not a directory: $1"
dir=$(cd "$1" && pwd -P)
port=$2
valid_port "$port"
pidfile=$STATE/serve-$port.pid
log=$LOGDIR/vllm-musa-ci-serve-$port.log

if [[ -f $pidfile ]]; then
  read -r pid piddir <"$pidfile" || true
  if alive "$pid"; then
    [[ $piddir == "$dir" ]] || die "127.0.0.1:$port is already served by our pid $pid for $piddir (run: $me --stop $port)"
    answers "$port" || die "our server pid $pid for $dir is alive but 127.0.0.1:$port does not answer (see $log)"
    echo "$pid"; exit 0
  fi
  rm -f "$pidfile"
fi
answers "$port" && die "something else already answers on 127.0.0.1:$port"

off=$(stat -c %s "$log" 2>/dev/null || echo 0)
setsid "$PY" -u -m http.server --bind 127.0.0.1 --directory "$dir" "$port" >>"$log" 2>&1 </dev/null &
pid=$!
echo "$pid $dir" >"$pidfile"
for ((i = 0; i < 100; i++)); do
  if answers "$port"; then echo "$pid"; exit 0; fi
  alive "$pid" || break
  sleep 0.1
done
kill "$pid" 2>/dev/null || true
rm -f "$pidfile"
printf '%s: error: %s -m http.server did not answer on 127.0.0.1:%s within 10 s\n--- %s ---\n' "$me" "$PY" "$port" "$log" >&2
tail -c +"$((off + 1))" "$log" | tail -n 20 >&2
exit 1
