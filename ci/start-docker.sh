#!/usr/bin/env bash
# Make sure a Docker daemon with BuildKit answers on /var/run/docker.sock.
#
# Usage: ci/start-docker.sh [--check]
#   Starts /usr/sbin/dockerd in the background (log: /var/log/dockerd-ci.log)
#   unless `/usr/bin/docker info` already answers, waits up to 60 s for it, then
#   proves the daemon is usable: a container and a BuildKit RUN step reach the
#   apt mirror, and a DOCKER_BUILDKIT=1 build with a cache mount and a secret
#   mount works. The proof runs once per daemon process (stamp in
#   /run/vllm-musa-ci/); --check forces it again. Prints one line:
#   "dockerd <version> storage-driver=<driver> iptables=<on|off>".
#
# Always use /usr/bin/docker (Debian's docker.io, 20.10): /usr/local/bin/docker
# earlier on PATH is a different client without the buildx plugin.
#
# Flags that work on the CI machines (Debian 12, kernel 6.x, ext4 root, no
# systemd): plain `dockerd --storage-driver=overlay2` with Docker's own iptables
# (nft backend) rules; the default bridge network NATs to the outside, so
# containers and RUN steps reach the apt mirror. Fallbacks, tried automatically
# only when the first start fails for that reason:
#   overlay2 refused (graphdriver error) -> --storage-driver=vfs
#                                           --data-root=/var/lib/docker-vfs (slow, big)
#   iptables/bridge errors               -> --iptables=false plus a manual
#                                           MASQUERADE rule for the bridge subnet
# Env: DOCKERD_STORAGE_DRIVER=vfs|overlay2 (force), DOCKERD_IPTABLES=false (force),
#      DOCKERD_EXTRA_FLAGS="..." (appended verbatim).
set -Eeuo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DOCKER=/usr/bin/docker
DOCKERD=/usr/sbin/dockerd
LOG=/var/log/dockerd-ci.log
STATE=/run/vllm-musa-ci
SELFTEST_IMAGE=vllm-musa-ci/selftest:1
force_check=0
case "${1:-}" in
  --check) force_check=1 ;;
  "") ;;
  *) die "usage: $me [--check]" ;;
esac

[[ $(id -u) -eq 0 ]] || die "must run as root"
[[ -x $DOCKER && -x $DOCKERD ]] || die "$DOCKER or $DOCKERD missing: run ci/install-system-deps.sh"
mkdir -p "$STATE"
export DOCKER_HOST=unix:///var/run/docker.sock

answers() { "$DOCKER" info >/dev/null 2>&1; }

# start_dockerd FLAGS... -> 0 up, 1 died, 2 timed out (and killed).
# Leaves the log lines of this attempt in $attempt_log.
attempt_log=
start_dockerd() {
  local off pid i
  off=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
  printf '=== %s %s: starting %s %s\n' "$(date -Is)" "$me" "$DOCKERD" "$*" >>"$LOG"
  setsid "$DOCKERD" "$@" >>"$LOG" 2>&1 </dev/null &
  pid=$!
  for ((i = 0; i < 120; i++)); do
    if answers; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      attempt_log=$(tail -c +"$((off + 1))" "$LOG"); return 1
    fi
    sleep 0.5
  done
  attempt_log=$(tail -c +"$((off + 1))" "$LOG")
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
  return 2
}

nat_bridge() { # containers need NAT when dockerd runs with --iptables=false
  local subnet t
  subnet=$("$DOCKER" network inspect bridge -f '{{(index .IPAM.Config 0).Subnet}}')
  sysctl -qw net.ipv4.ip_forward=1
  for t in iptables iptables-legacy; do
    command -v "$t" >/dev/null || continue
    if "$t" -t nat -C POSTROUTING -s "$subnet" ! -o docker0 -j MASQUERADE 2>/dev/null ||
       "$t" -t nat -A POSTROUTING -s "$subnet" ! -o docker0 -j MASQUERADE 2>/dev/null; then
      return 0
    fi
  done
  die "dockerd runs with --iptables=false and no iptables backend accepts a MASQUERADE rule for $subnet: containers cannot reach the network (only --network host would work)"
}

started=0
if ! answers; then
  [[ -S /var/run/docker.sock ]] && ! pgrep -x dockerd >/dev/null && rm -f /var/run/docker.sock
  driver=${DOCKERD_STORAGE_DRIVER:-overlay2}
  iptables_flag=()
  [[ ${DOCKERD_IPTABLES:-true} == false ]] && iptables_flag=(--iptables=false)
  # shellcheck disable=SC2206
  extra=(${DOCKERD_EXTRA_FLAGS:-})
  ok=0
  for _ in 1 2 3; do
    rc=0
    # vfs gets its own data root: BuildKit's cache-mount records under
    # /var/lib/docker/buildkit would point at overlay2 snapshots vfs cannot find.
    root_flag=()
    [[ $driver == vfs && " ${extra[*]} " != *" --data-root"* ]] && root_flag=(--data-root=/var/lib/docker-vfs)
    start_dockerd --storage-driver="$driver" "${root_flag[@]}" "${iptables_flag[@]}" "${extra[@]}" || rc=$?
    if ((rc == 0)); then ok=1; break; fi
    if [[ $driver == overlay2 ]] && grep -qiE 'graphdriver|overlay' <<<"$attempt_log"; then
      printf '%s: overlay2 failed, falling back to --storage-driver=vfs\n' "$me" >&2
      driver=vfs; continue
    fi
    if ((${#iptables_flag[@]} == 0)) && grep -qiE 'iptables|nat chain|docker0|bridge' <<<"$attempt_log"; then
      printf '%s: iptables/bridge setup failed, retrying with --iptables=false\n' "$me" >&2
      iptables_flag=(--iptables=false); continue
    fi
    break
  done
  if ((ok == 0)); then
    printf '%s: error: dockerd did not come up (last attempt: %s, flags --storage-driver=%s %s %s %s)\n--- log of that attempt (%s) ---\n' \
      "$me" "$([[ $rc == 2 ]] && echo 'no answer within 60 s' || echo 'process exited')" \
      "$driver" "${root_flag[*]}" "${iptables_flag[*]}" "${extra[*]}" "$LOG" >&2
    tail -n 40 <<<"$attempt_log" >&2
    exit 1
  fi
  started=1
  ((${#iptables_flag[@]} == 0)) || nat_bridge
fi

# ---------------------------------------------------------------- self test
daemon_pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -xo dockerd || echo unknown)
daemon_id="$daemon_pid $(awk '{print $22}' "/proc/$daemon_pid/stat" 2>/dev/null || echo ?)"
stamp=$STATE/dockerd-checked
if ((force_check == 0 && started == 0)) && [[ -f $stamp && $(cat "$stamp") == "$daemon_id" ]]; then
  :
else
  work=$(mktemp -d /tmp/ci-start-docker.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  fail() { # fail WHAT LOGFILE
    printf '%s: error: %s\n--- last 40 lines of output ---\n' "$me" "$1" >&2
    tail -n 40 "$2" >&2
    printf -- '--- last warnings/errors in %s ---\n' "$LOG" >&2
    grep -E 'level=(warning|error|fatal)' "$LOG" | grep -v 'module=grpc' | tail -n 10 >&2 || true
    exit 1
  }

  # A tiny image made from the host's own bash/cat/timeout (no registry needed).
  if ! "$DOCKER" image inspect "$SELFTEST_IMAGE" >/dev/null 2>&1; then
    root=$work/rootfs
    mkdir -p "$root"/{bin,etc,tmp,run}
    for b in /bin/bash /bin/cat /usr/bin/timeout; do
      cp -L "$b" "$root/bin/"
      ldd "$b" | grep -oE '/[^ ]+' | while read -r lib; do
        mkdir -p "$root$(dirname "$lib")"; cp -Ln "$lib" "$root$lib"
      done
    done
    ln -s bash "$root/bin/sh"
    printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
    tar -C "$root" -c . | "$DOCKER" import --change 'CMD ["/bin/bash"]' - "$SELFTEST_IMAGE" >"$work/import.log" 2>&1 ||
      fail "docker import of the self-test image failed" "$work/import.log"
  fi

  # Where must containers reach? The host's apt mirror (only it is reachable).
  uri=$(apt-get indextargets --no-release-info --format '$(REPO_URI)' 2>/dev/null | head -n1)
  uri=${uri:-http://deb.debian.org/debian/}
  hostport=${uri#*://}; hostport=${hostport%%/*}
  mhost=${hostport%%:*}; mport=80; [[ $uri == https://* ]] && mport=443
  [[ $hostport == *:* ]] && mport=${hostport##*:}
  probe="timeout 20 bash -c 'exec 3<>/dev/tcp/$mhost/$mport' && echo reached-$mhost"

  "$DOCKER" run --rm "$SELFTEST_IMAGE" bash -c "$probe" >"$work/run.log" 2>&1 ||
    fail "a container on the default bridge cannot reach the apt mirror $mhost:$mport" "$work/run.log"

  nonce=$RANDOM$RANDOM$RANDOM
  printf '%s' "$nonce" >"$work/secret"
  mkdir "$work/ctx"
  cat >"$work/ctx/Dockerfile" <<DOCKERFILE
FROM $SELFTEST_IMAGE
ARG NONCE
RUN --mount=type=cache,target=/x,id=vllm-musa-ci-selftest echo "\$NONCE" > /x/nonce && test -s /x/nonce
RUN --mount=type=secret,id=s,required=true test "\$(cat /run/secrets/s)" = "\$NONCE" && test ! -e /run/secrets/s.leak
RUN test ! -e /run/secrets/s
RUN $probe
DOCKERFILE
  DOCKER_BUILDKIT=1 "$DOCKER" build --progress=plain --build-arg NONCE="$nonce" \
    --secret id=s,src="$work/secret" --iidfile "$work/iid" "$work/ctx" >"$work/build.log" 2>&1 ||
    fail "DOCKER_BUILDKIT=1 $DOCKER build with cache/secret mounts and network access failed" "$work/build.log"
  grep -q "reached-$mhost" "$work/build.log" ||
    fail "BuildKit build succeeded but its RUN step did not report reaching $mhost" "$work/build.log"
  "$DOCKER" rmi "$(cat "$work/iid")" >/dev/null 2>&1 || true
  printf '%s' "$daemon_id" >"$stamp"
fi

read -r version driver < <("$DOCKER" info --format '{{.ServerVersion}} {{.Driver}}')
ipt=on
pgrep -xa dockerd | grep -q -- '--iptables=false' && ipt=off
echo "dockerd $version storage-driver=$driver iptables=$ipt"
