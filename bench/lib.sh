# shellcheck shell=bash
# Shared by the bench/ scripts (sourced): messages, installing what a script needs, and
# one envoy-injector `serve --standalone` over TLS on 127.0.0.1 with its own certificates.
# The sourcing script sets BIN, PORT, ADMIN_PORT and LOG_LEVEL first.

log() { printf '==> %s\n' "$*" >&2; }
die() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# need_apt COMMAND PACKAGE: installs PACKAGE with apt-get unless COMMAND exists.
need_apt() {
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2 (apt-get)"
  timeout 300 apt-get update -qq >/dev/null 2>&1 || true
  timeout 600 apt-get install -y -qq "$2" >/dev/null || die "cannot install $2; install it and rerun"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# rss_kb PID KEY: a /proc/PID/status value in kB (VmRSS, VmHWM).
rss_kb() { awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status"; }

machine() {
  printf '%s CPUs, %s, Linux %s' "$(nproc)" \
    "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" "$(uname -r)"
}

WORK=$(mktemp -d)
SERVER_PID=
stop_server() {
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    # Graceful shutdown first; force it if it lingers.
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}
cleanup() {
  stop_server
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_server [EXTRA SERVE FLAGS...]: starts the server, waits for /readyz.
# shellcheck disable=SC2120 # callers may pass no flags
start_server() {
  port_free "$PORT" || die "port $PORT is in use; set PORT"
  port_free "$ADMIN_PORT" || die "port $ADMIN_PORT is in use; set ADMIN_PORT"
  [[ -f $WORK/ca.crt ]] \
    || "$BIN" certs --service localhost --namespace bench --out-dir "$WORK" --san 127.0.0.1 >/dev/null
  log "starting envoy-injector serve --standalone on 127.0.0.1:$PORT (admin $ADMIN_PORT) $*"
  ${ENV_PREFIX:-} "$BIN" --log-level "$LOG_LEVEL" serve --standalone \
    --addr "127.0.0.1:$PORT" --admin-addr "127.0.0.1:$ADMIN_PORT" \
    --tls-cert "$WORK/tls.crt" --tls-key "$WORK/tls.key" "$@" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 150); do
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; die "server exited at start"; }
    if curl -fsS --max-time 1 "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  cat "$WORK/server.log" >&2
  die "server not ready after 30s"
}

build_release() {
  if [[ $BIN == target/release/envoy-injector ]]; then
    log "building the release binary"
    timeout 1800 cargo build --release --locked
  fi
  [[ -x $BIN ]] || die "no binary at $BIN"
}
