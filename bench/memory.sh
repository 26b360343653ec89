#!/usr/bin/env bash
# Memory under a burst of large bodies: idle RSS, peak RSS (VmHWM) while CONCURRENCY
# clients each POST a BODY_MB MiB review at once over TLS, and RSS each second for 10 s
# after the burst. Run as `make bench-memory`; results are printed and kept in
# bench/results/. BIN=path runs another build of the binary (default: release).
set -euo pipefail

cd "$(dirname "$0")/.."
CONCURRENCY=${CONCURRENCY:-64}
BODY_MB=${BODY_MB:-8}
PORT=${PORT:-18453}
ADMIN_PORT=${ADMIN_PORT:-19093}
BIN=${BIN:-target/release/envoy-injector}
REVIEW=tests/fixtures/admission/replicaset-generatename-init-volumes.json
RESULTS=bench/results

LOG_LEVEL=warn
# shellcheck source=bench/lib.sh
source bench/lib.sh

need_apt curl curl
build_release
PAD=$(( BODY_MB * 1024 * 1024 - 1024 - $(wc -c <"$REVIEW") ))
{ cat "$REVIEW"; head -c "$PAD" /dev/zero | tr '\0' ' '; } >"$WORK/body.json"

start_server
post() {
  # HTTP/1.1: curl 7.88 reports the RST_STREAM(NO_ERROR) that follows an early HTTP/2
  # answer (RFC 9113 §8.1) as a failure instead of reading the answer.
  curl -sS --http1.1 -o /dev/null -w '%{http_code}\n' --max-time 120 --cacert "$WORK/ca.crt" \
    -H 'Content-Type: application/json' --data-binary "@$1" \
    "https://127.0.0.1:$PORT/mutate?timeout=30s"
}
post "$REVIEW" >/dev/null
sleep 1
IDLE=$(rss_kb "$SERVER_PID" VmRSS)

log "burst: $CONCURRENCY concurrent POSTs of $BODY_MB MiB"
STARTED=$(date +%s.%N)
for _ in $(seq "$CONCURRENCY"); do post "$WORK/body.json" >>"$WORK/codes" & done
wait_curls() { while [[ $(jobs -rp | grep -vc "^$SERVER_PID\$") -gt 0 ]]; do sleep 0.1; done; }
wait_curls
ELAPSED=$(awk -v a="$STARTED" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
PEAK=$(rss_kb "$SERVER_PID" VmHWM)
AFTER=()
for _ in $(seq 10); do sleep 1; AFTER+=("$(( $(rss_kb "$SERVER_PID" VmRSS) / 1024 ))"); done
CODES=$(sort "$WORK/codes" | uniq -c | awk '{printf "%s x %s, ", $1, $2}')
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RESULTS"
SUMMARY="envoy-injector memory burst, $STAMP, $BIN, $(machine)
burst: $CONCURRENCY x $BODY_MB MiB POST over TLS (curl) in ${ELAPSED}s; answers: ${CODES%, }
idle RSS $((IDLE / 1024)) MiB; peak RSS (VmHWM) $((PEAK / 1024)) MiB; RSS each second after (MiB): ${AFTER[*]}"
printf '%s\n' "$SUMMARY" | tee "$RESULTS/memory-$STAMP.txt"
