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
