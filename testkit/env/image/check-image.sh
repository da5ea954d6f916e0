#!/usr/bin/env bash
# The image check of testkit/env/test.sh: fails when the operator image cannot be built,
# holds anything beyond what it should, or does not start.
#   1. builds the image (testkit/env/image/build-image.sh: cached, under a second when nothing
#      changed) and unpacks its archive (testkit/env/runtime/unpack-image.sh);
#   2. its config runs /usr/local/bin/etcd-operator run as 65532:65532, port 8443 (HTTPS);
#   3. its root filesystem is exactly EXPECTED below (type, mode, owner, path): the
#      binary, the libraries it loads, the loader, CA certificates and the user files;
#   4. no shell can start in it;
#   5. chrooted, as 65532:65532, with the image's environment only, the binary prints
#      its version and --help, and `crd` prints manifests/10-crd.yaml exactly.
# Needs root (chroot). The libraries listed are x86_64's.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$ROOT"

EXPECTED="d 755 0:0 ./etc
d 755 0:0 ./etc/ssl
d 755 0:0 ./etc/ssl/certs
d 755 0:0 ./lib
d 755 0:0 ./lib/x86_64-linux-gnu
d 755 0:0 ./lib64
d 755 0:0 ./usr
d 755 0:0 ./usr/local
d 755 0:0 ./usr/local/bin
f 644 0:0 ./etc/group
f 644 0:0 ./etc/nsswitch.conf
f 644 0:0 ./etc/passwd
f 644 0:0 ./etc/ssl/certs/ca-certificates.crt
f 755 0:0 ./lib/x86_64-linux-gnu/libc.so.6
f 755 0:0 ./lib/x86_64-linux-gnu/libgcc_s.so.1
f 755 0:0 ./lib/x86_64-linux-gnu/libm.so.6
f 755 0:0 ./lib64/ld-linux-x86-64.so.2
f 755 0:0 ./usr/local/bin/etcd-operator"

fail() { echo "image check FAILED: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (chroot)"
[ "$(uname -m)" = x86_64 ] || fail "the expected file list is x86_64's; this is $(uname -m)"

archive=$(bash testkit/env/image/build-image.sh)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
bash testkit/env/runtime/unpack-image.sh "$archive" "$TMP/image"
rootfs="$TMP/image/rootfs"
config="$TMP/image/config.json"

echo "== image config"
jq -e '.user == "65532:65532" and .entrypoint == ["/usr/local/bin/etcd-operator"]
  and .cmd == ["run"] and .exposedPorts == ["8443/tcp"] and .workingDir == "/"' \
  "$config" >/dev/null || fail "unexpected config: $(jq -c . "$config")"

echo "== root filesystem: exactly the expected files"
actual=$(cd "$rootfs" && find . -mindepth 1 -printf '%y %m %U:%G %p\n' | LC_ALL=C sort)
if [ "$actual" != "$(LC_ALL=C sort <<<"$EXPECTED")" ]; then
  diff <(LC_ALL=C sort <<<"$EXPECTED") <(echo "$actual") >&2 || true
  fail "the root filesystem differs from the expected list (< expected, > image)"
fi

# in_image ARGS...: runs ARGS chrooted into the image as its user, with its environment.
mapfile -t image_env < <(jq -r '.env[]' "$config")
user=$(jq -r .user "$config")
chroot_bin=$(command -v chroot)
in_image() {
  env -i "${image_env[@]}" "$chroot_bin" --userspec="$user" "$rootfs" "$@"
}

echo "== no shell"
for sh in /bin/sh /bin/bash /bin/dash /usr/bin/sh /bin/busybox; do
  rc=0
  in_image "$sh" -c true 2>/dev/null || rc=$?
  [ "$rc" = 127 ] || fail "$sh -c true exited $rc in the image (127: not found, was expected)"
done

echo "== the binary starts as $user with only the image's libraries"
version=$(in_image /usr/local/bin/etcd-operator --version) || fail "--version did not run"
[ "$version" = "etcd-operator $(jq -r '.image | split(":") | last' "$config")" ] ||
  fail "--version printed '$version' for image $(jq -r .image "$config")"
in_image /usr/local/bin/etcd-operator --help >"$TMP/help" || fail "--help exited non-zero"
grep -q '^Usage: etcd-operator' "$TMP/help" || fail "--help printed no usage: $(head -5 "$TMP/help")"
in_image /usr/local/bin/etcd-operator crd >"$TMP/crd" || fail "crd exited non-zero"
cmp -s "$TMP/crd" manifests/10-crd.yaml || fail "crd in the image differs from manifests/10-crd.yaml"
echo "image check passed: $(jq -r .image "$config"), $(stat -c %s "$archive") bytes compressed, $(du -sb "$rootfs" | cut -f1) bytes unpacked"
