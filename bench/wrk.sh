#!/usr/bin/env bash
# Throughput against the transport's own ceiling, with wrk (Debian's), over TLS on
# 127.0.0.1, client and server sharing the machine. For each connection count (1, 32,
# 1000): the same listener answering `GET /mutate` (405, no body read, no admission: the
# ceiling of TLS + HTTP here) beside POSTs of the captured 5 KB review; the review's
# req/s over the ceiling's is the ratio. Then the ~250 KB "huge Pod" review on one
# connection, for its latency. Run as `make bench-wrk`; results printed and kept in
# bench/results/.
#
# Knobs (environment): DURATION (5s), THREADS (1), LOG_LEVEL (warn), PORT (18473),
# ADMIN_PORT (19473), CONNECTIONS ("1 32 1000").
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s}
THREADS=${THREADS:-1}
LOG_LEVEL=${LOG_LEVEL:-warn}
PORT=${PORT:-18473}
ADMIN_PORT=${ADMIN_PORT:-19473}
CONNECTIONS=${CONNECTIONS:-1 32 1000}
BIN=${BIN:-target/release/envoy-injector}
REVIEW=tests/fixtures/admission/replicaset-generatename-init-volumes.json
RESULTS=bench/results
# shellcheck source=bench/lib.sh
source bench/lib.sh

need_apt wrk wrk
need_apt jq jq
need_apt curl curl
build_release
# 1000 connections need 1000 descriptors on each side.
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# The huge Pod: the 5 KB review's Pod grown to 50 containers x 30 env (benches/common).
jq -c '.request.object.spec.containers[0] as $app
  | .request.object.spec.containers = [range(0; 50) as $c | $app | .name = "app-\($c)"
      | .env = [range(0; 30) as $e | {name: "SETTING_\($c)_\($e)", value: "\($c)-\($e)-\("x" * 110)"}]]' \
  "$REVIEW" >"$WORK/huge.json"

post_script() {
  cat >"$WORK/$2.lua" <<LUA
local file = assert(io.open("$1", "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
LUA
}
post_script "$REVIEW" review
post_script "$WORK/huge.json" huge

start_server
for body in "$REVIEW" "$WORK/huge.json"; do
  curl -fsS --max-time 10 --cacert "$WORK/ca.crt" -H 'Content-Type: application/json' \
    --data-binary "@$body" "https://127.0.0.1:$PORT/mutate?timeout=10s" >"$WORK/one.json" \
    || die "POST /mutate failed"
  jq -e '.response.allowed == true and (.response.patch | length > 0)' "$WORK/one.json" >/dev/null \
    || die "expected an allowed response with a patch, got: $(head -c 500 "$WORK/one.json")"
done
URL="https://127.0.0.1:$PORT/mutate?timeout=10s"

# run_wrk LABEL CONNECTIONS [wrk args...]: prints "req/s p50 p99 errors non2xx".
run_wrk() {
  local label=$1 connections=$2 threads=$THREADS
  shift 2
  (( threads > connections )) && threads=$connections
  log "wrk: $label, $connections connections, $DURATION"
  timeout "$(( ${DURATION%s} + 60 ))" wrk --latency -t"$threads" -c"$connections" -d"$DURATION" "$@" \
    >"$WORK/$label-$connections.txt" 2>&1 || die "wrk failed ($label): $(cat "$WORK/$label-$connections.txt")"
  awk '
    /^Requests\/sec:/ { rps = $2 }
    $1 == "50%" { p50 = $2 }
    $1 == "99%" { p99 = $2 }
    /Socket errors:/ { gsub(",", ""); errors = $4 + $6 + $8 + $10 }
    /Non-2xx or 3xx responses:/ { non2xx = $5 }
    END { printf "%d %s %s %d %d\n", rps, p50, p99, errors, non2xx }
  ' "$WORK/$label-$connections.txt"
}

ROWS=()
RATIO_32=
for n in $CONNECTIONS; do
  read -r C_RPS C_P50 C_P99 C_ERR _ < <(run_wrk ceiling "$n" "$URL")
  read -r R_RPS R_P50 R_P99 R_ERR R_BAD < <(run_wrk review "$n" -s "$WORK/review.lua" "$URL")
  RATIO=$(awk -v r="$R_RPS" -v c="$C_RPS" 'BEGIN { printf "%.2f", (c > 0 ? r / c : 0) }')
  [[ $n == 32 ]] && RATIO_32=$RATIO
  ROWS+=("$(printf '%5s connections: review %6s req/s (p50 %s, p99 %s, %s socket errors, %s non-2xx) | GET /mutate 405 %6s req/s (p50 %s, p99 %s, %s socket errors) | ratio %s' \
    "$n" "$R_RPS" "$R_P50" "$R_P99" "$R_ERR" "$R_BAD" "$C_RPS" "$C_P50" "$C_P99" "$C_ERR" "$RATIO")")
done
read -r H_RPS H_P50 H_P99 H_ERR H_BAD < <(run_wrk huge 1 -s "$WORK/huge.lua" "$URL")
RSS=$(rss_kb "$SERVER_PID" VmHWM)

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RESULTS"
{
  echo "envoy-injector wrk comparison, $STAMP, commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "machine: $(machine)"
  echo "server:  $BIN serve --standalone, log level $LOG_LEVEL, TLS (rustls), embedded template"
  echo "load:    $(wrk --version 2>&1 | head -1 | awk '{print $1, $2}'), -t$THREADS -d$DURATION, HTTP/1.1 keep-alive, same machine"
  printf '%s\n' "${ROWS[@]}"
  echo "ratio at 32 connections (review / ceiling): $RATIO_32"
  echo "huge review ($(wc -c <"$WORK/huge.json") B), 1 connection: $H_RPS req/s, p50 $H_P50, p99 $H_P99 ($H_ERR socket errors, $H_BAD non-2xx)"
  echo "server peak RSS (VmHWM): $((RSS / 1024)) MiB"
} | tee "$RESULTS/wrk-$STAMP.txt"
