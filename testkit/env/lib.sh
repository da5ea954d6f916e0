# shellcheck shell=bash
# Shared shell helpers of the testkit/env/ scripts. Source it; it defines functions only.

# running PIDFILE: the process recorded in PIDFILE exists and is not a zombie (a process
# that exited but was not reaped yet still answers `kill -0`).
running() {
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1")
  [ -e "/proc/$pid" ] || return 1
  ! grep -q ') Z ' "/proc/$pid/stat" 2>/dev/null
}

# stop_pidfile PIDFILE: stops the process recorded in PIDFILE (SIGTERM, SIGKILL after 10 s)
# and removes the file.
stop_pidfile() {
  local pid
  [ -f "$1" ] || return 0
  pid=$(cat "$1")
  if running "$1"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do running "$1" || break; sleep 0.1; done
    if running "$1"; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$1"
}
