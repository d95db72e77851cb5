#!/usr/bin/env bash
# The serving targets of issue #9 in one run on one model (default: the synth
# Llama-3.2-1B Q4_0), with `shardlm bench serve` as the client:
#   1. shardlm serve and llama.cpp's llama-server (-np P -cb, same threads,
#      same context per slot) at 1, 4, 8, 16 clients, interleaved per client
#      count (8 clients ROUNDS8 times, order alternated, best of each: the
#      target's row): aggregate generated tok/s, TTFT and ITL p50/p99; the
#      ratios 8 streams / 1 stream and shardlm / llama-server at 8;
#   2. one stream through serve vs `shardlm bench -m` decode tok/s (same
#      threads, prompt tokens and gen ONE_GEN), alternated ROUNDS times, best
#      of each, a new serve process each round as bench -m is, and the
#      server's own cost per token from its /metrics;
#   3. the running streams' p99 ITL while a long (LONG_TOKENS) prompt is read
#      beside them, vs their median otherwise (chunked prefill);
#   4. with SOAK=1 (SOAK=only: just this): SOAK_CLIENTS clients for
#      SOAK_SECONDS, errors counted, the server's RSS after the first minute
#      and at the end.
# Usage: scripts/bench-serve.sh [BUILD_DIR] [MODEL.gguf]
# Environment: THREADS (2) CLIENTS ("1 4 8 16") PROMPT words (32) GEN (64)
#   REQUESTS per client (2) CTX per slot (512) ROUNDS (4) ONE_GEN (128) ROUNDS8 (3) SERVE_ARGS (extra
#   `shardlm serve` options) LONG_TOKENS (2048; 0 skips 3.) LONG_CLIENTS (4) LONG_GEN (256:
#   the streams' requests outlast the long prompt's reading)
#   SOAK (0) SOAK_CLIENTS (32) SOAK_SECONDS (300)
#   LLAMA_SERVER (../shared/peers/llama.cpp/bin/llama-server beside the checkout; "none" skips it)
# Every server this script starts is killed when it exits, however it exits.
set -euo pipefail

BUILD=${1:-build}
MODEL=${2:-/tmp/shardlm-bench/l1b-q4_0.gguf}
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-1 4 8 16}
PROMPT=${PROMPT:-32}
GEN=${GEN:-64}
REQUESTS=${REQUESTS:-2}
CTX=${CTX:-512}
ROUNDS=${ROUNDS:-4}
ROUNDS8=${ROUNDS8:-3}
ONE_GEN=${ONE_GEN:-128}
SERVE_ARGS=${SERVE_ARGS:-}
LONG_TOKENS=${LONG_TOKENS:-2048}
LONG_CLIENTS=${LONG_CLIENTS:-4}
LONG_GEN=${LONG_GEN:-256}
SOAK=${SOAK:-0}
SOAK_CLIENTS=${SOAK_CLIENTS:-32}
SOAK_SECONDS=${SOAK_SECONDS:-300}
LLAMA_SERVER=${LLAMA_SERVER:-$(dirname "$0")/../../shared/peers/llama.cpp/bin/llama-server}

. "$(dirname "$0")/serve-bench-lib.sh"
if [ "$LLAMA_SERVER" != none ] && [ ! -x "$LLAMA_SERVER" ]; then
  die "LLAMA_SERVER=$LLAMA_SERVER: not an executable (LLAMA_SERVER=none skips llama-server)"
fi
MAX_CLIENTS=0
for n in $CLIENTS; do [ "$n" -gt "$MAX_CLIENTS" ] && MAX_CLIENTS=$n; done

# start_shardlm SLOTS CTX: sets URL and PID.
start_shardlm() {
  local port
  LOG=$WORK/shardlm-$1-$2.log
  port=$(free_port)
  "$SHARDLM" serve -m "$MODEL" --host 127.0.0.1 --port "$port" --parallel "$1" -c "$2" -t "$THREADS" \
    --queue 256 $SERVE_ARGS >"$LOG" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  URL=http://127.0.0.1:$port
  wait_healthy "$URL" "$PID" "$LOG"
}

rss_kib() { awk -v f="$2" '$1 == f ":" {print $2}' "/proc/$1/status"; }

echo "# bench-serve.sh: $(date -u '+%F %T') UTC, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model $MODEL, $THREADS threads, prompt $PROMPT words, gen $GEN, ctx $CTX per slot"

if [ "$SOAK" != only ]; then
# 1. Both servers side by side, interleaved per client count.
start_shardlm "$MAX_CLIENTS" "$CTX"; SHARDLM_URL=$URL; SHARDLM_PID=$PID
LLAMA_URL=
if [ "$LLAMA_SERVER" != none ]; then start_llama "$MAX_CLIENTS" "$CTX"; LLAMA_URL=$URL; LLAMA_PID=$PID; fi
for url in $SHARDLM_URL $LLAMA_URL; do bench "$url" --clients 1 --prompt "$PROMPT" --gen 8 --requests 1 >/dev/null; done

declare -A TOKS DECODE
echo
echo "| server | clients | gen tok/s | stream decode tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | failed requests |"
echo "|---|---:|---:|---:|---:|---:|---:|"
declare -A RUNS
for n in $CLIENTS; do
  requests=$((REQUESTS * n))
  # The target's row (8 clients) ROUNDS8 times, the servers' order alternated: best of each.
  reps=1
  [ "$n" = 8 ] && reps=$ROUNDS8
  for rep in $(seq "$reps"); do
    order="shardlm llama-server"
    [ $((rep % 2)) = 0 ] && order="llama-server shardlm"
    for name in $order; do
      url=$SHARDLM_URL
      if [ "$name" = llama-server ]; then [ -n "$LLAMA_URL" ] || continue; url=$LLAMA_URL; fi
      r=$(bench "$url" --clients "$n" --prompt "$PROMPT" --gen "$GEN" --requests "$requests" --label "$name")
      t=$(field "$r" tok_per_s)
      RUNS[$name-$n]="${RUNS[$name-$n]:-}${RUNS[$name-$n]:+ }$t"
      TOKS[$name-$n]=$(best "${TOKS[$name-$n]:-0}" "$t")
      DECODE[$name-$n]=$(best "${DECODE[$name-$n]:-0}" "$(field "$r" stream_decode_tok_per_s)")
      echo "| $name | $n | $t | $(field "$r" stream_decode_tok_per_s) |" \
        "$(field "$r" ttft_p50_ms) / $(field "$r" ttft_p99_ms) | $(field "$r" itl_p50_ms) / $(field "$r" itl_p99_ms) |" \
        "$(field "$r" errors) |"
      [ "$(field "$r" errors)" = 0 ] || echo "  ($name, $n clients: $(field "$r" first_error))"
    done
  done
done
[ -z "$LLAMA_URL" ] || stop_server "$LLAMA_PID"

echo
if [ -n "${TOKS[shardlm-1]:-}" ] && [ -n "${TOKS[shardlm-8]:-}" ]; then
  echo "8 streams / 1 stream (shardlm serve): $(ratio "${TOKS[shardlm-8]}" "${TOKS[shardlm-1]}")× in gen tok/s" \
    "(prompts included), $(ratio "$(python3 -c "print(8 * ${DECODE[shardlm-8]})")" "${DECODE[shardlm-1]}")× in" \
    "decode tok/s (8 × a stream's) (target ≥ 4)"
fi
if [ -n "${TOKS[shardlm-8]:-}" ] && [ -n "${TOKS[llama-server-8]:-}" ]; then
  echo "shardlm / llama-server at 8 clients, best of $ROUNDS8 alternated (shardlm ${RUNS[shardlm-8]}; llama-server" \
    "${RUNS[llama-server-8]} tok/s): $(ratio "${TOKS[shardlm-8]}" "${TOKS[llama-server-8]}")× (target ≥ 1.3)"
fi

# 2. One stream through serve against the model benchmark: same threads, same
# prompt length and gen, alternated ABBA over ROUNDS rounds, best of each.
# Each round starts a new server, as each bench -m is a new process: where a
# process's weight copies land in memory moves its decode speed by several
# per cent for its whole life, so one server measured ROUNDS times against
# ROUNDS fresh bench -m processes would compare one draw with the best of
# several. The server's /metrics before and after each request give its own
# cost, which the machine's load hardly moves: the client's wall time per
# token against the engine's decode step in the same run, and the
# scheduler's time around steps.
metric() { awk -v n="$2" '$1 == n {print $2}' <<<"$1"; }
per_step() {  # per_step BEFORE AFTER NAME: the counter's increase per decode step, in ms
  python3 -c 'import sys; a, b, s0, s1 = map(float, sys.argv[1:]); print(f"{(b - a) / (s1 - s0) * 1e3:.3f}" if s1 > s0 else "-")' \
    "$(metric "$1" "$3")" "$(metric "$2" "$3")" "$(metric "$1" "$STEPS")" "$(metric "$2" "$STEPS")"
}
STEPS='shardlm_engine_steps_total{kind="decode"}'
serve_tps=() model_tps=() wall_ms=() engine_ms=() sched_ms=()
one_serve() {
  local before after r
  start_shardlm "$MAX_CLIENTS" "$CTX"
  bench "$URL" --clients 1 --prompt "$PROMPT" --gen 8 --requests 1 >/dev/null  # first decode steps pick kernels
  before=$(curl -s "$URL/metrics")
  r=$(bench "$URL" --clients 1 --prompt "$PROMPT" --gen "$ONE_GEN" --requests 1 --label one)
  after=$(curl -s "$URL/metrics")
  stop_server "$PID"
  ONE_PROMPT_TOKENS=$(field "$r" prompt_tokens)
  serve_tps+=("$(field "$r" stream_decode_tok_per_s)")
  wall_ms+=("$(python3 -c 'import sys; print(f"{1e3 / float(sys.argv[1]):.3f}")' "$(field "$r" stream_decode_tok_per_s)")")
  engine_ms+=("$(per_step "$before" "$after" 'shardlm_engine_step_seconds_total{kind="decode"}')")
  sched_ms+=("$(per_step "$before" "$after" 'shardlm_scheduler_overhead_seconds_total{kind="decode"}')")
}
one_model() {
  local t
  t=$("$SHARDLM" bench -m "$MODEL" -t "$THREADS" --prompt "$ONE_PROMPT_TOKENS" --gen "$ONE_GEN" |
    awk -F'|' -v t="$THREADS" '$2 + 0 == t && NF > 4 {gsub(/ /, "", $4); print $4; exit}')
  [ -n "$t" ] || die "shardlm bench -m printed no decode tok/s row for $THREADS threads"
  model_tps+=("$t")
}
stop_server "$SHARDLM_PID"
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then one_serve; one_model; else one_model; one_serve; fi
done
s=$(best "${serve_tps[@]}") m=$(best "${model_tps[@]}")
echo "one stream ($ONE_PROMPT_TOKENS prompt tokens, gen $ONE_GEN), best of $ROUNDS alternated: serve $s tok/s" \
  "(${serve_tps[*]}), bench -m $m tok/s (${model_tps[*]}): $(ratio "$s" "$m") (target ≥ 0.97)"
if [ -n "${DECODE[shardlm-8]:-}" ]; then
  # The 1-client row of 1. is one draw; this one-stream rate is the best of ROUNDS fresh servers.
  echo "8 streams / the best one stream of these rounds: $(ratio "$(python3 -c "print(8 * ${DECODE[shardlm-8]})")" "$s")×" \
    "in decode tok/s (target ≥ 4)"
fi
echo "  the server's own cost per token, per round: client's wall ms per token (${wall_ms[*]})," \
  "engine decode step ms (${engine_ms[*]}), scheduler ms around a step (${sched_ms[*]})"

# 3. Running streams while a long prompt is read.
if [ "$LONG_TOKENS" -gt 0 ]; then
start_shardlm $((LONG_CLIENTS + 1)) $((LONG_TOKENS + LONG_GEN + 256))
# Words for LONG_TOKENS tokens: the model's tokenizer says how many tokens 200 of them make.
r=$(bench "$URL" --clients 1 --prompt 200 --gen 1 --requests 1)
words=$((LONG_TOKENS * 200 / $(field "$r" prompt_tokens)))
r=$(bench "$URL" --clients "$LONG_CLIENTS" --prompt "$PROMPT" --gen "$LONG_GEN" --long-prompt "$words" --label long)
stop_server "$PID"
echo "long prompt: $(field "$r" long_prompt_tokens) tokens read in $(field "$r" long_ttft_ms) ms beside $LONG_CLIENTS streams;" \
  "their ITL meanwhile p50 $(field "$r" itl_beside_long_p50_ms) / p99 $(field "$r" itl_beside_long_p99_ms) ms" \
  "($(field "$r" itl_beside_long_count) gaps), otherwise p50 $(field "$r" itl_otherwise_p50_ms) ms:" \
  "p99 / median $(ratio "$(field "$r" itl_beside_long_p99_ms)" "$(field "$r" itl_otherwise_p50_ms)")× (target ≤ 3)"
fi

fi

# 4. Soak.
if [ "$SOAK" = 1 ] || [ "$SOAK" = only ]; then
  start_shardlm "$SOAK_CLIENTS" "$CTX"
  bench "$URL" --clients "$SOAK_CLIENTS" --prompt "$PROMPT" --gen "$GEN" --duration "$SOAK_SECONDS" --label soak \
    >"$WORK/soak.json" &
  LOAD=$!
  sleep 60
  rss_minute=$(rss_kib "$PID" VmRSS) anon_minute=$(rss_kib "$PID" RssAnon)
  wait "$LOAD" || die "bench serve --duration failed"
  rss_end=$(rss_kib "$PID" VmRSS) anon_end=$(rss_kib "$PID" RssAnon)
  r=$(cat "$WORK/soak.json")
  stop_server "$PID"
  echo "soak: $SOAK_CLIENTS clients × $SOAK_SECONDS s: $(field "$r" requests) requests, $(field "$r" errors) errors" \
    "($(field "$r" first_error)), $(field "$r" tok_per_s) tok/s; RSS $((rss_minute / 1024)) MiB after 1 min," \
    "$((rss_end / 1024)) MiB at the end: $(ratio "$rss_end" "$rss_minute")× (target 0 errors, ≤ 1.05);" \
    "of it anonymous (weights, the KV cache, resident from the start, and the heap)" \
    "$((anon_minute / 1024)) → $((anon_end / 1024)) MiB"
  [ "$(field "$r" errors)" = 0 ] || { echo "the server's log ends:"; tail -5 "$LOG"; }
fi
