#!/usr/bin/env bash
# make demo: start the standalone webhook on the embedded default template, post one
# captured AdmissionReview to it over TLS, print the JSON Patch and the resulting Pod,
# then stop the server with SIGTERM. No cluster needed.
set -euo pipefail
cd "$(dirname "$0")/.."

REVIEW=${REVIEW:-tests/fixtures/admission/seed-initializer-annotation.json}
PORT=${DEMO_PORT:-18443}
ADMIN_PORT=${DEMO_ADMIN_PORT:-19090}
BIN=target/debug/envoy-injector

# Cargo's own progress stays visible: on a fresh clone the first build compiles every
# dependency and takes minutes (about 2 on an idle 2-core machine, several times that when
# other builds share the cores); later runs take seconds.
if [[ ! -x "$BIN" || ! -x target/debug/examples/demo_client ]]; then
  echo "# first build: compiling envoy-injector and its dependencies takes a few minutes (about 2 on an idle 2-core machine)..." >&2
fi
cargo build --locked --bin envoy-injector --example demo_client

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

"$BIN" certs --service localhost --namespace demo --san 127.0.0.1 --out-dir "$work" >/dev/null
"$BIN" serve --standalone \
  --addr "127.0.0.1:$PORT" --admin-addr "127.0.0.1:$ADMIN_PORT" \
  --tls-cert "$work/tls.crt" --tls-key "$work/tls.key" 2>"$work/server.log" &
server_pid=$!

for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "demo: the server exited early:" >&2; cat "$work/server.log" >&2; exit 1
  fi
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null || { echo "demo: server not ready" >&2; cat "$work/server.log" >&2; exit 1; }

echo "# envoy-injector serve --standalone on https://127.0.0.1:$PORT (embedded default template)"
echo "# posting $REVIEW"
target/debug/examples/demo_client "https://127.0.0.1:$PORT/mutate?timeout=10s" "$work/ca.crt" "$REVIEW"

echo
echo "# admission metrics"
curl -fsS "http://127.0.0.1:$ADMIN_PORT/metrics" | grep -E '^envoy_injector_(admission_requests|injections)_total' || true

kill -TERM "$server_pid"
wait "$server_pid"
server_pid=""
echo "# server stopped cleanly"
echo "# the binary is $BIN; for the README's tour: export PATH=\$PWD/target/debug:\$PATH"
