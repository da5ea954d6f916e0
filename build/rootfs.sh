#!/usr/bin/env bash
# Assembles the operator image's root filesystem: the one script behind both image builds
# (the Dockerfile's builder stage, and testkit/env/image/build-image.sh on a machine without a
# registry, which hands the result to the Dockerfile as the `rootfs` build context).
#
#   build/rootfs.sh BINARY OUT_DIR
#
# OUT_DIR must not exist or be empty. It receives, owned by whoever runs this (root in
# both builds), and nothing else (no shell, no package manager, no other tool):
#   /usr/local/bin/etcd-operator          BINARY
#   the shared libraries BINARY needs     at the paths `ldd` resolves them to, and the
#                                         dynamic loader at the binary's interpreter path
#   /etc/ssl/certs/ca-certificates.crt    CA certificates (CA_BUNDLE, default that path)
#   /etc/passwd, /etc/group               root and nonroot (65532:65532, as distroless)
#   /etc/nsswitch.conf                    hosts: files before dns (etcd members are
#                                         reached by DNS name; kubelets manage /etc/hosts)
set -euo pipefail

usage() { echo "usage: $0 BINARY OUT_DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
BIN=$1
OUT=$2
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

[ -x "$BIN" ] || { echo "$BIN: not an executable" >&2; exit 1; }
[ -f "$CA_BUNDLE" ] || { echo "$CA_BUNDLE: no CA bundle (install ca-certificates)" >&2; exit 1; }
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ]; then
  echo "$OUT: exists and is not empty" >&2
  exit 1
fi

# put SRC DEST MODE: copies the content of SRC (symlinks followed) to OUT/DEST.
put() {
  install -D -m "$3" "$(readlink -f "$1")" "$OUT$2"
}

# The libraries the binary loads, as absolute paths, the loader included. `ldd` prints
# `name => /path (addr)` for a library, `/path (addr)` for the loader, and no path for the
# kernel's vDSO; a library it cannot find is an error, not a smaller image.
libraries() {
  local out
  out=$(ldd "$BIN" 2>&1) || {
    case $out in *"not a dynamic executable"*) return 0 ;; esac
    echo "ldd $BIN: $out" >&2
    return 1
  }
  if grep -q 'not found' <<<"$out"; then
    echo "ldd $BIN: missing libraries:" >&2
    grep 'not found' <<<"$out" >&2
    return 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"
}

mkdir -p "$OUT"
chmod 0755 "$OUT"
put "$BIN" /usr/local/bin/etcd-operator 0755
libs=$(libraries)
for lib in $libs; do
  put "$lib" "$lib" 0755
done
put "$CA_BUNDLE" /etc/ssl/certs/ca-certificates.crt 0644

install -d -m 0755 "$OUT/etc"
cat >"$OUT/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin
PASSWD
cat >"$OUT/etc/group" <<'GROUP'
root:x:0:
nonroot:x:65532:
GROUP
echo 'hosts: files dns' >"$OUT/etc/nsswitch.conf"
chmod 0644 "$OUT/etc/passwd" "$OUT/etc/group" "$OUT/etc/nsswitch.conf"
# Directories made by install -D follow the umask; every one is 0755 in the image.
find "$OUT" -type d -exec chmod 0755 {} +

echo "rootfs in $OUT: the binary and $(wc -w <<<"$libs") libraries ($(du -sh "$OUT" | cut -f1))"
