# Sourced by the ci/ scripts, after their `set -Eeuo pipefail`:
#   $me       the script as messages name it (ci/NAME.sh)
#   die MSG   print "$me: error: MSG" on stderr and exit 1
#   an ERR trap that names the line, the exit code and the command that failed
#   run CMD   run CMD with its output appended to $log (the script sets it); when CMD fails,
#             print it and the last 40 lines of its output on stderr and exit 1
me=ci/$(basename "$0")
die() { printf '%s: error: %s\n' "$me" "$*" >&2; exit 1; }
trap 'printf "%s: line %s: command failed (exit %s): %s\n" "$me" "$LINENO" "$?" "$BASH_COMMAND" >&2' ERR
run() {
  if ! "$@" >>"$log" 2>&1; then
    printf '%s: error: command failed: %s\n--- last 40 lines of output ---\n' "$me" "$*" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
