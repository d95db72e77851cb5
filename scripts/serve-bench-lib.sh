# Shared by the serving benchmarks (bench-serve.sh, bench-serve-cluster.sh):
# sourced after BUILD and MODEL are set. Every process added to PIDS is
# killed when the script exits, however it exits; WORK is its scratch folder.
SHARDLM=$BUILD/shardlm
die() { echo "$(basename "$0"): $*" >&2; exit 1; }
[ -x "$SHARDLM" ] || die "$SHARDLM: not built (give the build directory as the first argument)"
[ -f "$MODEL" ] || die "$MODEL: no such model (shardlm synth --preset llama3.2-1b --type q4_0 -o $MODEL)"
command -v python3 >/dev/null || die "python3 is needed to pick free ports"
command -v curl >/dev/null || die "curl is needed to wait for the servers"

WORK=$(mktemp -d /tmp/serve-bench.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 0.5
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_healthy URL PID LOG: until GET URL/health answers 200, or the server died, or 300 s passed.
wait_healthy() {
  local url=$1 pid=$2 log=$3
  for _ in $(seq 1500); do
    kill -0 "$pid" 2>/dev/null || { tail -5 "$log" >&2; die "the server at $url exited (log above)"; }
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health" || true)" = 200 ] && return 0
    sleep 0.2
  done
  die "the server at $url was not healthy after 300 s (log: $log)"
}

# start_llama SLOTS CTX: llama.cpp's llama-server (LLAMA_SERVER) with SLOTS
# slots of CTX positions and THREADS threads; sets URL and PID.
start_llama() {
  local port log=$WORK/llama-$1-$2.log
  port=$(free_port)
  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" -np "$1" -cb -c $(($1 * $2)) -t "$THREADS" \
    -tb "$THREADS" >"$log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  URL=http://127.0.0.1:$port
  wait_healthy "$URL" "$PID" "$log"
}

stop_server() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}

# field JSON NAME: one field of a `bench serve` result line.
field() { python3 -c 'import json, sys; v = json.loads(sys.argv[1]).get(sys.argv[2]); print("-" if v is None else v)' "$1" "$2"; }
best() { python3 -c 'import sys; print(max(float(x) for x in sys.argv[1:]))' "$@"; }
ratio() { python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f"{a / b:.2f}" if b else "-")' "$1" "$2"; }
bench() { "$SHARDLM" bench serve --url "$1" "${@:2}"; }
