#!/usr/bin/env bash
# Offline `inject` throughput and memory: generates a multi-document manifest of SIZE_MB
# (default 20) from the corpus in tests/fixtures/offline/ (Deployments, StatefulSets,
# CronJobs, Services, ConfigMaps with block scalars, comments, anchors), runs
# `envoy-injector inject -f FILE` on it and reports MB/s and peak RSS (/usr/bin/time -v),
# with the largest input document, against the targets: >= 20 MB/s and
# peak RSS <= 50 MB + 3 x the largest document. Then the same for one big `kind: List`.
# With YAML output, it then checks that `uninject` of the output gives back the input
# byte for byte (the output is the input's text with the additions).
#
# Run as `make bench-inject` (release binary; BIN=target/debug/envoy-injector for debug).
set -euo pipefail
cd "$(dirname "$0")/.."

SIZE_MB=${SIZE_MB:-20}
BIN=${BIN:-target/release/envoy-injector}
FORMAT=${FORMAT:-yaml}

# shellcheck source=bench/lib.sh
source bench/lib.sh

# GNU time, not the shell keyword: it reports the peak RSS.
need_apt /usr/bin/time time
build_release

# The valid corpus, renamed per copy so that every document differs.
corpus=(scalars.yaml anchors-and-blocks.yaml list-and-json.yaml comments.yaml custom-resources.yaml)
generate() {
  local out=$1 target=$(( SIZE_MB * 1024 * 1024 )) i=0
  : >"$out"
  while (( $(stat -c %s "$out") < target )); do
    for f in "${corpus[@]}"; do
      printf -- '---\n' >>"$out"
      sed -e "s/name: \([a-z][a-z0-9-]*\)\$/name: \1-$i/" "tests/fixtures/offline/$f" >>"$out"
    done
    i=$((i + 1))
  done
}

# One `kind: List` holding SIZE_MB of Deployments: the largest-document case.
generate_list() {
  local out=$1 target=$(( SIZE_MB * 1024 * 1024 )) i=0 chunk
  printf 'apiVersion: v1\nkind: List\nitems:\n' >"$out"
  chunk=$(sed -n '/^- apiVersion: apps\/v1/,$p' tests/fixtures/offline/list-and-json.yaml | sed '/^---/,$d')
  while (( $(stat -c %s "$out") < target )); do
    for _ in $(seq 1 200); do
      printf '%s\n' "${chunk//productpage-v1/productpage-$i}" >>"$out"
      i=$((i + 1))
    done
  done
}

largest_document_bytes() {
  awk '/^---/ { if (n > max) max = n; n = 0; next } { n += length($0) + 1 } END { if (n > max) max = n; print max }' "$1"
}

measure() {
  local name=$1 input=$2 bytes largest
  bytes=$(stat -c %s "$input")
  largest=$(largest_document_bytes "$input")
  /usr/bin/time -v "$BIN" inject -f "$input" -o "$FORMAT" >"$WORK/out" 2>"$WORK/err" || {
    tail -5 "$WORK/err" >&2
    die "inject failed on $name"
  }
  local secs cpu rss
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s }' "$WORK/err")
  cpu=$(awk -F': ' '/User time|System time/ { s += $2 } END { print s }' "$WORK/err")
  rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$WORK/err")
  # Wall-clock MB/s is the target; CPU seconds say how much of a busy machine's time
  # was ours (other builds on the same 2 cores stretch the wall clock).
  awk -v name="$name" -v bytes="$bytes" -v largest="$largest" -v secs="$secs" -v cpu="$cpu" -v rss="$rss" -v out="$(stat -c %s "$WORK/out")" 'BEGIN {
    mb = bytes / 1048576; rss_mb = rss / 1024; limit = 50 + 3 * largest / 1048576
    printf "%-16s %5.1f MB in, %5.1f MB out, largest document %7.1f KB: %5.2f s wall (%5.1f MB/s), %5.2f s CPU, peak RSS %5.1f MB (target <= %.1f MB) %s\n",
      name, mb, out / 1048576, largest / 1024, secs, mb / secs, cpu, rss_mb, limit,
      (mb / secs >= 20 && rss_mb <= limit) ? "ok" : "MISSED"
  }'
  if [[ $FORMAT == yaml ]]; then
    if "$BIN" uninject -f "$WORK/out" 2>/dev/null | cmp -s - "$input"; then
      echo "$name: inject | uninject == input, byte for byte"
    else
      echo "$name: inject | uninject differs from the input (MISSED)"
    fi
  fi
}

generate "$WORK/multi.yaml"
generate_list "$WORK/list.yaml"
echo "binary: $BIN ($(machine), load average $(cut -d' ' -f1 /proc/loadavg)); output: -o $FORMAT"
measure "multi-document" "$WORK/multi.yaml"
measure "one kind: List" "$WORK/list.yaml"
