#!/usr/bin/env bash
# Turns an image exported as an OCI archive (testkit/env/image/build-image.sh) into what a node
# runs: a root filesystem and the image's run configuration. Needs tar, gzip, sha256sum
# and jq; no container tooling.
#
#   testkit/env/runtime/unpack-image.sh ARCHIVE DIR [REF]
#
# DIR must not exist or be empty. It receives:
#   DIR/rootfs/       the layers applied in order (OCI whiteouts honoured); owners and
#                     modes kept when run as root
#   DIR/config.json   {"image", "manifestDigest", "entrypoint", "cmd", "user", "env",
#                     "workingDir", "exposedPorts"}: the image config's fields, with
#                     absent ones as [] / "" and workingDir "/" when unset
# REF picks the manifest by its org.opencontainers.image.ref.name when the archive holds
# several; without it the archive must hold exactly one. Every blob's digest is checked.
set -euo pipefail

usage() { echo "usage: $0 ARCHIVE DIR [REF]" >&2; exit 2; }
[ $# -ge 2 ] && [ $# -le 3 ] || usage
ARCHIVE=$1
DIR=$2
REF=${3:-}
die() { echo "unpack-image: $*" >&2; exit 1; }

[ -f "$ARCHIVE" ] || die "$ARCHIVE: no such file"
if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then die "$DIR: exists and is not empty"; fi
LAYOUT=$(mktemp -d)
PARTIAL="$DIR.partial"
trap 'rm -rf "$LAYOUT" "$PARTIAL"' EXIT
tar -xf "$ARCHIVE" -C "$LAYOUT"
jq -e '.imageLayoutVersion == "1.0.0"' "$LAYOUT/oci-layout" >/dev/null ||
  die "$ARCHIVE: not an OCI image layout 1.0.0"

# blob DIGEST: the path of a blob, after checking its content against the digest.
blob() {
  local algo=${1%%:*} hex=${1#*:}
  [ "$algo" = sha256 ] || die "digest $1: only sha256 is supported"
  [[ $hex =~ ^[0-9a-f]{64}$ ]] || die "digest $1: malformed"
  local path="$LAYOUT/blobs/sha256/$hex"
  [ -f "$path" ] || die "blob $1 missing from $ARCHIVE"
  [ "$(sha256sum <"$path" | cut -d' ' -f1)" = "$hex" ] || die "blob $1: content does not match"
  echo "$path"
}

# The manifest: the one named REF, or the only one.
manifest_descriptor() {
  local found
  if [ -n "$REF" ]; then
    found=$(jq -c --arg ref "$REF" \
      '[.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $ref)]' \
      "$LAYOUT/index.json")
  else
    found=$(jq -c '.manifests' "$LAYOUT/index.json")
  fi
  [ "$(jq length <<<"$found")" = 1 ] ||
    die "$ARCHIVE: $(jq length <<<"$found") manifests${REF:+ named $REF}; name one of: $(
      jq -r '[.manifests[].annotations["org.opencontainers.image.ref.name"]] | join(" ")' "$LAYOUT/index.json")"
  jq -c '.[0]' <<<"$found"
}

# apply_layer PATH MEDIATYPE: removes what the layer's whiteouts hide in the lower layers,
# then extracts the layer without its whiteout entries.
apply_layer() {
  local path=$1 type=$2 zip entry dir name
  case $type in
    application/vnd.oci.image.layer.v1.tar) zip=() ;;
    application/vnd.oci.image.layer.v1.tar+gzip) zip=(-z) ;;
    *) die "layer media type $type is not supported" ;;
  esac
  while IFS= read -r entry; do
    entry=${entry#./}
    case /$entry/ in */../*) die "layer entry $entry leaves the root filesystem" ;; esac
    name=${entry##*/}
    dir=$(dirname "$entry")
    case $name in
      .wh..wh..opq)
        [ ! -d "$PARTIAL/rootfs/$dir" ] ||
          find "$PARTIAL/rootfs/$dir" -mindepth 1 -maxdepth 1 -exec rm -rf {} + ;;
      .wh.*) rm -rf "${PARTIAL:?}/rootfs/$dir/${name#.wh.}" ;;
    esac
  done < <(tar "${zip[@]}" -tf "$path")
  tar "${zip[@]}" -xf "$path" -C "$PARTIAL/rootfs" --numeric-owner \
    --exclude='.wh.*' --exclude='*/.wh.*'
}

rm -rf "$PARTIAL"
mkdir -p "$PARTIAL/rootfs"
descriptor=$(manifest_descriptor)
[ "$(jq -r .mediaType <<<"$descriptor")" = application/vnd.oci.image.manifest.v1+json ] ||
  die "$ARCHIVE: $(jq -r .mediaType <<<"$descriptor"): only single-platform OCI image manifests are supported"
digest=$(jq -r .digest <<<"$descriptor")
manifest=$(blob "$digest")
while IFS=$'\t' read -r layer type; do
  path=$(blob "$layer")
  apply_layer "$path" "$type"
done < <(jq -r '.layers[] | [.digest, .mediaType] | @tsv' "$manifest")
chmod 0755 "$PARTIAL/rootfs"

config=$(blob "$(jq -r .config.digest "$manifest")")
jq --arg image "$(jq -r '.annotations["org.opencontainers.image.ref.name"] // ""' <<<"$descriptor")" \
  --arg digest "$digest" '.config // {} | {
    image: $image,
    manifestDigest: $digest,
    entrypoint: (.Entrypoint // []),
    cmd: (.Cmd // []),
    user: (.User // ""),
    env: (.Env // []),
    workingDir: (if (.WorkingDir // "") == "" then "/" else .WorkingDir end),
    exposedPorts: ((.ExposedPorts // {}) | keys)
  }' "$config" >"$PARTIAL/config.json"

mkdir -p "$DIR"
mv "$PARTIAL/rootfs" "$PARTIAL/config.json" "$DIR/"
echo "unpacked $(jq -r .image "$DIR/config.json") ($digest) into $DIR" >&2
