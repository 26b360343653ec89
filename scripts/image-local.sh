#!/usr/bin/env bash
# make image-local: the envoy-injector image without Docker or a registry. Builds the
# binary static (glibc, +crt-static: no dynamic loader, no shared library), writes it with
# scripts/image_archive.py as an image archive (`docker save` format: `docker load`,
# `kind load image-archive` and `ctr images import` take it), and, when NODE_SH names a
# node script with a `load-image TAR` command, loads it into that node.
#
#   IMAGE          tag of the image (default envoy-injector:dev)
#   IMAGE_ALIASES  more tags for the same image, space-separated (e.g. a second tag to roll to)
#   IMAGE_ARCHIVE  where the archive goes (default target/image/envoy-injector.tar)
#   NODE_SH        a node script: `$NODE_SH load-image ARCHIVE` loads it
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-envoy-injector:dev}
ARCHIVE=${IMAGE_ARCHIVE:-target/image/envoy-injector.tar}
case $(uname -m) in
  x86_64) triple=x86_64-unknown-linux-gnu; arch=amd64 ;;
  aarch64) triple=aarch64-unknown-linux-gnu; arch=arm64 ;;
  *) echo "image-local: no static build set up for $(uname -m); use make image (Docker)" >&2; exit 1 ;;
esac
command -v python3 >/dev/null || { echo "image-local: python3 is required to write the image archive" >&2; exit 1; }

start=$(date +%s)
# --target keeps this static build in target/$triple, apart from the dynamic builds of
# cargo build/test, and RUSTFLAGS away from build scripts.
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked --target "$triple" --bin envoy-injector
built=target/$triple/release/envoy-injector
# Static means no program interpreter: refuse to package a binary that needs one.
if LC_ALL=C readelf -l "$built" 2>/dev/null | grep -q 'Requesting program interpreter'; then
  echo "image-local: $built is dynamically linked; the image has no shared libraries" >&2; exit 1
fi
# Symbols stripped as in the Dockerfile; done on a copy, so the build keeps the release
# profile's settings (and its cache).
bin=target/image/envoy-injector
mkdir -p target/image
strip -o "$bin" "$built"
"$bin" --version >/dev/null

# shellcheck disable=SC2086 # IMAGE_ALIASES is a list of tags
IMAGE_ARCH=$arch python3 scripts/image_archive.py "$bin" "$ARCHIVE" "$IMAGE" ${IMAGE_ALIASES:-}
echo "image-local: built in $(($(date +%s) - start)) s; binary $(du -h "$bin" | cut -f1), archive $(du -h "$ARCHIVE" | cut -f1)"

if [[ -n ${NODE_SH:-} ]]; then
  [[ -f $NODE_SH ]] || { echo "image-local: NODE_SH=$NODE_SH is not a file" >&2; exit 1; }
  bash "$NODE_SH" load-image "$ARCHIVE"
  echo "image-local: loaded into the node of $NODE_SH"
fi
