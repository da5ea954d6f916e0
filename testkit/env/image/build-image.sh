#!/usr/bin/env bash
# Builds the operator image without a registry or a daemon (`make image`), and exports it
# as an OCI archive into the project cache. Prints the archive's path on stdout (and
# nothing else there), so `archive=$(testkit/env/image/build-image.sh)` works.
#
#   1. cargo build --release --locked -p etcd-operator --bin etcd-operator
#   2. build/rootfs.sh assembles the root filesystem from that binary on this host
#   3. buildah builds the Dockerfile with that directory as the build context `rootfs`,
#      which replaces the Dockerfile's builder stage (never pulled), tags the image
#      localhost/etcd-operator:<version>, :<version>-<key> (the first 12 hex digits of the
#      cache key below, so a changed build has a new name) and :dev, and exports
#      $CACHE/images/etcd-operator-<version>-<key>.oci.tar (gzip layers); the newest
#      KEEP_ARCHIVES (4) archives are kept, so that builds of other worktrees sharing
#      the cache never take away the image a running environment was given.
#   4. records the tags in $CACHE/images/index.tsv (`REF<TAB>ARCHIVE`, the archive
#      relative to that directory), from which each node imports the archive under every
#      tag (nodes.sh), and the content tag in <archive>.ref, which is what
#      local-up.sh sets in the Deployment (a rebuilt image rolls the Deployment out).
#
# Cached: the key is a digest of the assembled root filesystem (binary, libraries, CA
# bundle, users: content, paths and modes) and of the Dockerfile. When it matches the
# key recorded with the archive and the image is still in buildah's storage, nothing is
# built. File times are set to SOURCE_DATE_EPOCH (default 0), so the same key gives the
# same image digest.
#
# | variable             | default                              |
# | ETCD_OPERATOR_CACHE  | ~/.cache/etcd-operator               |
# | CARGO_TARGET_DIR     | <repo>/target                        |
# | BUILDAH_ROOT         | $CACHE/images/storage (vfs driver)   |
# | BUILDAH_RUNROOT      | /run/etcd-operator-buildah           |
# | IMAGE_NAME           | localhost/etcd-operator              |
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
CACHE=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
IMAGES="$CACHE/images"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN="$TARGET_DIR/release/etcd-operator"
IMAGE_NAME=${IMAGE_NAME:-localhost/etcd-operator}
EPOCH=${SOURCE_DATE_EPOCH:-0}
BUILDAH=(buildah --storage-driver vfs --root "${BUILDAH_ROOT:-$IMAGES/storage}"
  --runroot "${BUILDAH_RUNROOT:-/run/etcd-operator-buildah}")

cd "$ROOT"
# shellcheck source=testkit/env/lib.sh
source testkit/env/lib.sh
bash testkit/env/build/install-deps.sh >&2
mkdir -p "$IMAGES"
# One build at a time per cache: the storage, the key files and the archives are shared.
exec 9>"$IMAGES/.build.lock"
flock 9

echo "== building the release binary" >&2
build_start=$SECONDS
quietly "$IMAGES/cargo-release.log" cargo build --release --locked -p etcd-operator --bin etcd-operator
echo "   built in $((SECONDS - build_start)) s" >&2
VERSION=$("$BIN" --version | awk '{ print $2 }')
# How many exported archives are kept (the newest): an environment started from an
# older build of another worktree keeps finding its image for a while.
KEEP_ARCHIVES=${KEEP_ARCHIVES:-4}

WORK=$(mktemp -d "$IMAGES/.work.XXXXXX")
cleanup() {
  # Working containers of an interrupted build (buildah build removes its own on success).
  "${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

bash build/rootfs.sh "$BIN" "$WORK/rootfs" >&2

# key: the root filesystem as the image will hold it (type, mode, path, content), the
# Dockerfile, and the file time every layer entry gets.
key() {
  (
    cd "$WORK/rootfs"
    find . -printf '%y %m %p %l\n' | LC_ALL=C sort
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  ) | cat - Dockerfile <(echo "SOURCE_DATE_EPOCH=$EPOCH") | sha256sum | cut -d' ' -f1
}
KEY=$(key)
CONTENT_REF="$IMAGE_NAME:$VERSION-${KEY:0:12}"
TAGS=("$IMAGE_NAME:$VERSION" "$CONTENT_REF" "$IMAGE_NAME:dev")
# One archive per content: builds of other trees sharing this cache never replace the
# image a running environment was given.
ARCHIVE="$IMAGES/etcd-operator-$VERSION-${KEY:0:12}.oci.tar"

# index_refs REF...: records that the REFs name this archive in index.tsv (earlier lines
# for those refs are dropped; the file is replaced by renaming).
index_refs() {
  local index="$IMAGES/index.tsv" tmp="$IMAGES/.index.tsv.tmp" ref
  touch "$index"
  awk -F '\t' -v refs="$*" 'BEGIN { n = split(refs, r, " "); for (i = 1; i <= n; i++) drop[r[i]] = 1 }
    !($1 in drop)' "$index" >"$tmp"
  for ref in "$@"; do printf '%s\t%s\n' "$ref" "${ARCHIVE##*/}" >>"$tmp"; done
  mv -f "$tmp" "$index"
}

# prune_archives: keeps the KEEP_ARCHIVES newest archives of this version; the older ones
# go with their index lines and their content tags in buildah's storage.
prune_archives() {
  local old index="$IMAGES/index.tsv" tmp="$IMAGES/.index.tsv.tmp"
  ls -1t "$IMAGES"/etcd-operator-"$VERSION"-*.oci.tar 2>/dev/null | tail -n +"$((KEEP_ARCHIVES + 1))" |
    while read -r old; do
      awk -F '\t' -v archive="${old##*/}" '$2 != archive' "$index" >"$tmp" && mv -f "$tmp" "$index"
      "${BUILDAH[@]}" rmi "$(cat "$old.ref" 2>/dev/null)" >/dev/null 2>&1 || true
      rm -f "$old" "$old.ref"
    done
}

if [ -f "$ARCHIVE" ] && "${BUILDAH[@]}" inspect --type image "$CONTENT_REF" >/dev/null 2>&1; then
  echo "== image $CONTENT_REF is up to date ($ARCHIVE)" >&2
  touch "$ARCHIVE"
  "${BUILDAH[@]}" tag "$CONTENT_REF" "$IMAGE_NAME:$VERSION" "$IMAGE_NAME:dev" >&2
  index_refs "${TAGS[@]}"
  echo "$CONTENT_REF" >"$ARCHIVE.ref"
  echo "$ARCHIVE"
  exit 0
fi

echo "== building $IMAGE_NAME:$VERSION with buildah (vfs, chroot isolation)" >&2
"${BUILDAH[@]}" build --isolation chroot --timestamp "$EPOCH" \
  --build-context rootfs="$WORK/rootfs" \
  "${TAGS[@]/#/--tag=}" -f Dockerfile . >&2

echo "== exporting $ARCHIVE" >&2
"${BUILDAH[@]}" push --quiet --compression-format gzip "$IMAGE_NAME:$VERSION" \
  "oci-archive:$WORK/image.oci.tar:$IMAGE_NAME:$VERSION" >&2
mv -f "$WORK/image.oci.tar" "$ARCHIVE"
index_refs "${TAGS[@]}"
echo "$CONTENT_REF" >"$ARCHIVE.ref"
prune_archives
# Images no tag names any more (the storage is this script's alone).
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
echo "== $CONTENT_REF: $(stat -c %s "$ARCHIVE") bytes in $ARCHIVE" >&2
echo "$ARCHIVE"
