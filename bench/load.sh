#!/usr/bin/env bash
# Load test of the release binary over TLS on 127.0.0.1: req/s, p50/p99 latency, idle and
# peak RSS. Run as `make bench-load`; results are printed and kept in bench/results/.
#
# Load generator: oha (crates.io). It does TLS with a custom CA, POSTs a body from a
# file, reports latency percentiles as JSON and speaks HTTP/2. wrk has no HTTP/2 and
# needs Lua for a POST body; h2load reports no percentiles.
#
# Knobs (environment): DURATION (15s), CONNECTIONS (32), PORT (18443), ADMIN_PORT (19090),
# LOG_LEVEL (info, the server's default), H2_CONNECTIONS x H2_STREAMS (4 x 8) for HTTP/2.
set -euo pipefail

cd "$(dirname "$0")/.."
# Where `cargo install` puts oha.
PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-32}
PORT=${PORT:-18443}
ADMIN_PORT=${ADMIN_PORT:-19090}
LOG_LEVEL=${LOG_LEVEL:-info}
H2_CONNECTIONS=${H2_CONNECTIONS:-4}
H2_STREAMS=${H2_STREAMS:-8}
OHA_VERSION=1.16.0
REVIEW=tests/fixtures/admission/replicaset-generatename-init-volumes.json
BIN=target/release/envoy-injector
RESULTS=bench/results

# shellcheck source=bench/lib.sh
source bench/lib.sh

ensure_oha() {
  if command -v oha >/dev/null 2>&1; then
    return 0
  fi
  log "installing oha $OHA_VERSION (cargo install, rustls; a few minutes on 2 cores)"
  timeout 1800 cargo install oha --locked --version "$OHA_VERSION" \
    || die "cannot install oha; run: cargo install oha --locked --version $OHA_VERSION"
}

# One oha run; prints its JSON to $2. Bounded so a stuck run cannot hang the script.
run_oha() {
  local label=$1 out=$2
  shift 2
  log "load: $label for $DURATION"
  timeout "$(( ${DURATION%s} + 60 ))" oha --no-tui --output-format json -z "$DURATION" \
    -m POST -H 'Content-Type: application/json' -D "$REVIEW" \
    --cacert "$WORK/ca.crt" "$@" "https://127.0.0.1:$PORT/mutate?timeout=10s" >"$out" \
    || die "oha failed ($label)"
}

# "req/s p50_ms p99_ms responses failed" from an oha JSON report: failed counts non-200
# answers and transport errors, except requests cut off by the -z deadline.
oha_numbers() {
  jq -r '[
      (.summary.requestsPerSec | floor),
      (.latencyPercentiles.p50 * 1000 * 1000 | round / 1000),
      (.latencyPercentiles.p99 * 1000 * 1000 | round / 1000),
      ([.statusCodeDistribution[]] | add // 0),
      ([.statusCodeDistribution | to_entries[] | select(.key != "200") | .value] | add // 0)
        + ([.errorDistribution | to_entries[] | select(.key != "aborted due to deadline") | .value] | add // 0)
    ] | @tsv' "$1"
}

[[ ${DURATION%s} =~ ^[0-9]+$ ]] || die "DURATION must be whole seconds like 15s, found $DURATION"
[[ -f $REVIEW ]] || die "missing $REVIEW"
need_apt jq jq
need_apt curl curl
ensure_oha
build_release

start_server

# The load must measure injections, not errors: check one answer first.
curl -fsS --max-time 10 --cacert "$WORK/ca.crt" -H 'Content-Type: application/json' \
  --data-binary "@$REVIEW" "https://127.0.0.1:$PORT/mutate?timeout=10s" >"$WORK/one.json" \
  || die "POST /mutate failed"
jq -e '.response.allowed == true and (.response.patch | length > 0)' "$WORK/one.json" >/dev/null \
  || die "expected an allowed response with a patch, got: $(head -c 500 "$WORK/one.json")"

sleep 1
IDLE_RSS=$(rss_kb "$SERVER_PID" VmRSS)

run_oha "HTTP/1.1, $CONNECTIONS connections" "$WORK/h1.json" -c "$CONNECTIONS"
AFTER_H1_HWM=$(rss_kb "$SERVER_PID" VmHWM)
run_oha "HTTP/2, $H2_CONNECTIONS connections x $H2_STREAMS streams" "$WORK/h2.json" \
  --http2 -c "$H2_CONNECTIONS" -p "$H2_STREAMS"
PEAK_RSS=$(rss_kb "$SERVER_PID" VmHWM)
END_RSS=$(rss_kb "$SERVER_PID" VmRSS)

read -r H1_RPS H1_P50 H1_P99 H1_N H1_BAD < <(oha_numbers "$WORK/h1.json")
read -r H2_RPS H2_P50 H2_P99 H2_N H2_BAD < <(oha_numbers "$WORK/h2.json")

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RESULTS"
SUMMARY=$(cat <<EOF
envoy-injector load test, $STAMP, commit $(git rev-parse --short HEAD 2>/dev/null || echo none)
machine: $(machine)
server:  release build, serve --standalone, log level $LOG_LEVEL, TLS (rustls), embedded template
load:    oha $(oha --version | awk '{print $2}'), POST $(wc -c <"$REVIEW") B review ($(basename "$REVIEW")), $DURATION, same machine (client and server share the CPUs)
http/1.1: $CONNECTIONS connections: $H1_RPS req/s, p50 $H1_P50 ms, p99 $H1_P99 ms ($H1_N responses, $H1_BAD failed)
http/2:   $H2_CONNECTIONS connections x $H2_STREAMS streams: $H2_RPS req/s, p50 $H2_P50 ms, p99 $H2_P99 ms ($H2_N responses, $H2_BAD failed)
memory:  idle RSS $((IDLE_RSS / 1024)) MiB ($IDLE_RSS kB), peak RSS (VmHWM) $((AFTER_H1_HWM / 1024)) MiB after HTTP/1.1, $((PEAK_RSS / 1024)) MiB after HTTP/2 ($PEAK_RSS kB), RSS at end $((END_RSS / 1024)) MiB
EOF
)
printf '%s\n' "$SUMMARY" | tee "$RESULTS/load-$STAMP.txt"
cp "$WORK/h1.json" "$RESULTS/load-$STAMP-http1.json"
cp "$WORK/h2.json" "$RESULTS/load-$STAMP-http2.json"
log "kept in $RESULTS/load-$STAMP.txt (+ oha JSON)"
(( H1_BAD == 0 && H2_BAD == 0 )) || die "some requests failed or were not answered 200; see the oha JSON"
