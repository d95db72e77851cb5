#!/usr/bin/env bash
# Issue #9's serving benchmark on a cluster: `shardlm serve` on one machine
# and `shardlm serve --nodes` over local workers in tensor parallel (tp 2)
# and pipeline parallel (pp 2), with llama.cpp's llama-server beside them,
# at 1, 4, 8 and 16 clients, interleaved per client count (ROUNDS times,
# the order rotated each round). Every configuration has THREADS compute
# threads in all: one process with THREADS, or two workers with THREADS / 2.
# The workers map their own copy of the model (--worker-model), so nothing
# is streamed. Prints one table row per run and a best-of summary.
# Usage: scripts/bench-serve-cluster.sh [BUILD_DIR] [MODEL.gguf]
# Environment: THREADS (2) CLIENTS ("1 4 8 16") PROMPT words (32) GEN (64)
#   REQUESTS per client (2) CTX per slot (512) ROUNDS (2) LAYOUTS ("single tp2 pp2 llama")
#   LLAMA_SERVER (../shared/peers/llama.cpp/bin/llama-server beside the checkout)
# Every process this script starts is killed when it exits, however it exits.
set -euo pipefail

BUILD=${1:-build}
MODEL=${2:-/tmp/shardlm-bench/l1b-q4_0.gguf}
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-1 4 8 16}
PROMPT=${PROMPT:-32}
GEN=${GEN:-64}
REQUESTS=${REQUESTS:-2}
CTX=${CTX:-512}
ROUNDS=${ROUNDS:-2}
LAYOUTS=${LAYOUTS:-single tp2 pp2 llama}
LLAMA_SERVER=${LLAMA_SERVER:-$(dirname "$0")/../../shared/peers/llama.cpp/bin/llama-server}

. "$(dirname "$0")/serve-bench-lib.sh"
[[ " $LAYOUTS " != *" llama "* || -x "$LLAMA_SERVER" ]] ||
  die "LLAMA_SERVER=$LLAMA_SERVER: not an executable (leave llama out of LAYOUTS to skip it)"
[ $((THREADS % 2)) = 0 ] || die "THREADS=$THREADS: must be even (two workers get half each)"
MAX_CLIENTS=0
for n in $CLIENTS; do [ "$n" -gt "$MAX_CLIENTS" ] && MAX_CLIENTS=$n; done

# The cluster's shared secret, for the workers and the coordinators.
TOKEN_FILE=$WORK/token
python3 -c 'import secrets; print(secrets.token_hex(16))' >"$TOKEN_FILE"

# start_worker NAME: a worker on a free loopback port; sets WORKER to host:port.
start_worker() {
  local port_file=$WORK/$1.port log=$WORK/$1.log
  "$SHARDLM" worker --listen 127.0.0.1:0 --port-file "$port_file" --probe-mib 1 --token-file "$TOKEN_FILE" >"$log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 300); do
    [ -s "$port_file" ] && { WORKER=127.0.0.1:$(cat "$port_file"); return 0; }
    kill -0 "$!" 2>/dev/null || { tail -5 "$log" >&2; die "worker $1 exited (log above)"; }
    sleep 0.1
  done
  die "worker $1 wrote no port in 30 s (log: $log)"
}

# start_layout NAME: the server of one layout; sets URL_<NAME>.
start_layout() {
  local port log=$WORK/serve-$1.log args=(-t "$THREADS")
  port=$(free_port)
  case $1 in
    llama)
      start_llama "$MAX_CLIENTS" "$CTX"
      printf -v "URL_$1" '%s' "$URL"
      return ;;
    tp2|pp2)
      local a b
      start_worker "$1-a"; a=$WORKER
      start_worker "$1-b"; b=$WORKER
      args=(-t $((THREADS / 2)) --nodes "$a,$b" --worker-model "$MODEL" --token-file "$TOKEN_FILE")
      if [ "$1" = tp2 ]; then args+=(--tp 2 --pp 1); else args+=(--tp 1 --pp 2); fi ;;
  esac
  "$SHARDLM" serve -m "$MODEL" --host 127.0.0.1 --port "$port" --parallel "$MAX_CLIENTS" -c "$CTX" --queue 256 \
    "${args[@]}" >"$log" 2>&1 &
  PIDS+=("$!")
  wait_healthy "http://127.0.0.1:$port" "$!" "$log"
  printf -v "URL_$1" '%s' "http://127.0.0.1:$port"
}

echo "# bench-serve-cluster.sh: $(date -u '+%F %T') UTC, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model $MODEL, $THREADS threads in all per layout, prompt $PROMPT words, gen $GEN, ctx $CTX per slot"
for layout in $LAYOUTS; do
  start_layout "$layout"
  url_var=URL_$layout
  bench "${!url_var}" --clients 1 --prompt "$PROMPT" --gen 8 --requests 1 >/dev/null  # first steps pick kernels
done

echo "| layout | clients | round | gen tok/s | stream decode tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | failed requests |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
declare -A BEST
read -ra order <<<"$LAYOUTS"
for n in $CLIENTS; do
  for round in $(seq "$ROUNDS"); do
    for layout in "${order[@]}"; do
      url_var=URL_$layout
      r=$(bench "${!url_var}" --clients "$n" --prompt "$PROMPT" --gen "$GEN" --requests $((REQUESTS * n)) --label "$layout")
      t=$(field "$r" tok_per_s)
      BEST[$layout-$n]=$(best "${BEST[$layout-$n]:-0}" "$t")
      echo "| $layout | $n | $round | $t | $(field "$r" stream_decode_tok_per_s) |" \
        "$(field "$r" ttft_p50_ms) / $(field "$r" ttft_p99_ms) | $(field "$r" itl_p50_ms) / $(field "$r" itl_p99_ms) |" \
        "$(field "$r" errors) |"
      [ "$(field "$r" errors)" = 0 ] || echo "  ($layout, $n clients: $(field "$r" first_error))"
    done
    order=("${order[@]:1}" "${order[0]}")
  done
done

echo
echo "Best gen tok/s of $ROUNDS rounds:"
for n in $CLIENTS; do
  line="  $n clients:"
  for layout in $LAYOUTS; do line+=" $layout ${BEST[$layout-$n]}"; done
  echo "$line"
done
