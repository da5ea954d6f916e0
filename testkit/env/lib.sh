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

# each_status WIDTH DESCRIBE NAME...: a line for each NAME, the name in WIDTH columns and
# then what `DESCRIBE NAME` prints about it; fails when DESCRIBE failed (the part is not
# running) for any of them.
each_status() {
    local width=$1 describe=$2 name line rc=0
    shift 2
    for name in "$@"; do
        line=$("$describe" "$name") || rc=1
        printf "%-${width}s %s\n" "$name" "$line"
    done
    return $rc
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

# quietly LOG CMD...: runs CMD (a command or a function) with its output in LOG instead of
# the terminal; while it runs, a line every 30 s says how long it has taken and where its
# output goes; when it fails, the last 30 lines of LOG. Returns CMD's status.
quietly() {
  local out=$1 pid start=$SECONDS next=30 rc=0
  shift
  mkdir -p "$(dirname "$out")"
  "$@" >"$out" 2>&1 </dev/null &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - start >= next)); then
      printf '   ... %d s (output: %s)\n' "$((SECONDS - start))" "$out" >&2
      next=$((next + 30))
    fi
    sleep 0.2
  done
  wait "$pid" || rc=$?
  if ((rc)); then
    echo "   failed ($rc); the end of $out:" >&2
    tail -n 30 "$out" | sed 's/^/   | /' >&2
  fi
  return "$rc"
}

# go_tool_binary SRC CACHE: the Go command in directory SRC (one of the environment's own,
# testkit/env/runtime/pause or node/logind), built once per source into CACHE/<name>/<key>/<name>,
# where the key is a digest of its go.mod, go.sum and Go files; prints the binary's path.
go_tool_binary() {
  local src=$1 cache=$2 name key bin
  name=$(basename "$src")
  key=$(cat "$src"/go.mod "$src"/go.sum "$src"/*.go 2>/dev/null | sha256sum | cut -c1-12)
  bin=$cache/$name/$key/$name
  if [[ ! -x $bin ]]; then
    mkdir -p "${bin%/*}"
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$bin.partial" .)
    mv "$bin.partial" "$bin"
  fi
  echo "$bin"
}
