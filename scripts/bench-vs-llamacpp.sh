#!/usr/bin/env bash
# bench-vs-llamacpp.sh [BUILD_DIR] [MODEL_DIR]: shardlm next to llama.cpp on the
# same files, in one run, interleaved: prompt processing (512 tokens) and decode
# from an empty context, at each thread count, several rounds; prints one table
# with the best of the rounds for each engine and their ratio, and the median
# (and range) of each round's own ratio: the two engines of a round run
# seconds apart, so a round's ratio rides out the host's slow spells that the
# best of the rounds, taken from different minutes, can fall into.
#
# llama.cpp is the build in ../shared/peers/llama.cpp (see its README), or
# $LLAMA_BENCH. Model files are random-weight GGUFs of real shapes written once
# by `shardlm synth` into MODEL_DIR (default /tmp/shardlm-bench; never commit
# them). Settings, from the environment:
#   SHARDLM_BENCH_MODELS  default "l1b-q4_0 l1b-q8_0 l1b-q4_k_m l8b-q4_0"; also
#               l1b-q4_k, l1b-q2_k, l1b-q3_k
#   ROUNDS (3)  THREADS ("1 2")  PROMPT (512)  GEN (64)
#   DEPTH (0)   decode after this many tokens of context (llama-bench -d;
#               shardlm bench --prompt DEPTH), as a long conversation does
#   KV_TYPE     unset: each engine's default KV cache type (llama.cpp f16,
#               shardlm f32); f16 / f32: both engines use that type
#   LLAMA_MMAP  0 (default): llama-bench -mmp 0, weights read into its own
#               memory as shardlm copies them at load (on some machines a
#               mapped file streams far slower than anonymous memory);
#               1: llama.cpp's default, the file mapped
#   ISA         unset: each engine picks its fastest path for this CPU;
#               avx2 / avx512: both engines held to that class, to measure a
#               path this CPU has but would not pick (shardlm: SHARDLM_ISA;
#               llama.cpp: a copy of its bin/ without the variants above it,
#               haswell for avx2, zen4 for avx512)
# Only a comparison within one run on one machine means anything: this
# machine's speed moves by tens of percent between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dir=${2:-/tmp/shardlm-bench}
shardlm="$build/shardlm"
llama=${LLAMA_BENCH:-../shared/peers/llama.cpp/bin/llama-bench}
rounds=${ROUNDS:-3}
threads=${THREADS:-"1 2"}
prompt=${PROMPT:-512}
gen=${GEN:-64}
depth=${DEPTH:-0}
kv_type=${KV_TYPE:-}
case "$kv_type" in ""|f16|f32) ;; *) echo "KV_TYPE=$kv_type: expected f16 or f32 (or unset)" >&2; exit 1 ;; esac
models=${SHARDLM_BENCH_MODELS:-"l1b-q4_0 l1b-q8_0 l1b-q4_k_m l8b-q4_0"}
[ -x "$shardlm" ] || { echo "no $shardlm: build it first (scripts/build.sh $build)" >&2; exit 1; }
[ -x "$llama" ] || { echo "no llama-bench at $llama: set LLAMA_BENCH" >&2; exit 1; }

declare -A preset=([l1b-q4_0]="llama3.2-1b q4_0" [l1b-q8_0]="llama3.2-1b q8_0" [l1b-q4_k]="llama3.2-1b q4_k"
                   [l1b-q2_k]="llama3.2-1b q2_k" [l1b-q3_k]="llama3.2-1b q3_k"
                   [l1b-q4_k_m]="llama3.2-1b q4_k_m" [l8b-q4_0]="llama3.1-8b q4_0")
mkdir -p "$dir"
for m in $models; do
  [ -n "${preset[$m]:-}" ] || { echo "unknown model $m (know: ${!preset[*]})" >&2; exit 1; }
  read -r p t <<<"${preset[$m]}"
  [ -f "$dir/$m.gguf" ] || "$shardlm" synth --preset "$p" --type "$t" -o "$dir/$m.gguf" >&2
done

results=$(mktemp)
llama_copy=""
trap 'rm -f "$results"; [ -z "$llama_copy" ] || rm -rf "$llama_copy"' EXIT
case "${ISA:-}" in
  "") ;;
  avx2|avx512)
    export SHARDLM_ISA=$ISA
    llama_copy=$(mktemp -d)
    cp -a "$(dirname "$llama")"/. "$llama_copy"
    [ "$ISA" = avx512 ] || rm -f "$llama_copy"/libggml-cpu-zen4.so
    llama="$llama_copy/$(basename "$llama")" ;;
  *) echo "ISA=$ISA: expected avx2 or avx512 (or unset)" >&2; exit 1 ;;
esac
# One line per measurement: model threads metric engine tok/s round.
record() { echo "$1 $2 $3 $4 $5 $r" >>"$results"; }

llama_kv=()
[ -z "$kv_type" ] || llama_kv=(-ctk "$kv_type" -ctv "$kv_type")
shardlm_kv=()
[ -z "$kv_type" ] || shardlm_kv=(--kv-type "$kv_type")
decode_test=decode
kv_label=${kv_type:-"each engine's default"}
[ "$depth" = 0 ] || decode_test="decode@$depth"

run_llama() {  # model threads
  local csv
  # Decode at a depth is a run of its own: llama-bench's -d would put the
  # prompt test at that depth too.
  csv=$(if [ "$depth" = 0 ]; then
          "$llama" -m "$dir/$1.gguf" -p "$prompt" -n "$gen" -t "$2" -r 1 -mmp "${LLAMA_MMAP:-0}" "${llama_kv[@]}" -o csv 2>/dev/null
        else
          "$llama" -m "$dir/$1.gguf" -p "$prompt" -n 0 -t "$2" -r 1 -mmp "${LLAMA_MMAP:-0}" "${llama_kv[@]}" -o csv 2>/dev/null
          "$llama" -m "$dir/$1.gguf" -p 0 -n "$gen" -d "$depth" -t "$2" -r 1 -mmp "${LLAMA_MMAP:-0}" "${llama_kv[@]}" -o csv 2>/dev/null | tail -n +2
        fi)
  # The header is plain, the rows quote every field; avg_ts is tok/s.
  echo "$csv" | awk -v m="$1" -v t="$2" -v d="$decode_test" -v r="$r" '
    NR == 1 { n = split($0, h, ","); for (i = 1; i <= n; i++) col[h[i]] = i; next }
    { sub(/^"/, ""); sub(/"$/, ""); split($0, f, "\",\"")
      print m, t, (f[col["n_prompt"]] > 0 ? "prompt" : d), "llama.cpp", f[col["avg_ts"]], r }' >>"$results"
}

run_shardlm() {  # model threads
  # Prompt and decode in separate runs so decode starts from an empty context
  # (or DEPTH tokens of one), as llama-bench's tg test does.
  local pp tg
  pp=$("$shardlm" bench -m "$dir/$1.gguf" -t "$2" --prompt "$prompt" --gen 0 --bandwidth-mib 64 "${shardlm_kv[@]}" 2>/dev/null |
       awk -F'|' '$2 ~ /^ *[0-9]+ *$/ { gsub(/ /, "", $3); print $3 }')
  tg=$("$shardlm" bench -m "$dir/$1.gguf" -t "$2" --prompt "$depth" --gen "$gen" --bandwidth-mib 64 "${shardlm_kv[@]}" 2>/dev/null |
       awk -F'|' '$2 ~ /^ *[0-9]+ *$/ { gsub(/ /, "", $4); print $4 }')
  record "$1" "$2" prompt shardlm "$pp"
  record "$1" "$2" "$decode_test" shardlm "$tg"
}

cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
first=$(set -- $models; echo "$1")
echo "cpu: $cpu, $(nproc) cpus"
"$shardlm" bench -m "$dir/$first.gguf" -t 1 --prompt 0 --gen 1 --bandwidth-mib 64 2>/dev/null | sed -n 's/^cpu: */shardlm: /p'
"$llama" -m "$dir/$first.gguf" -p 0 -n 1 -t 1 -r 1 2>&1 >/dev/null | sed -n 's/.*load_backend: loaded CPU backend from/llama.cpp: CPU backend/p' | head -1
echo "date: $(date -u +%FT%TZ); load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rounds: $rounds, prompt $prompt tokens, decode $gen tokens after $depth of context; KV cache: $kv_label; best of the rounds, and the ratio within each round"

for ((r = 1; r <= rounds; r++)); do
  for m in $models; do
    for t in $threads; do
      # Alternate who goes first so neither engine always gets the warmer machine.
      if ((r % 2)); then run_llama "$m" "$t"; run_shardlm "$m" "$t"; else run_shardlm "$m" "$t"; run_llama "$m" "$t"; fi
      echo "round $r/$rounds: $m, $t thread(s) done" >&2
    done
  done
done

echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| model | threads | test | llama.cpp tok/s | shardlm tok/s | shardlm / llama.cpp | a round's ratio: median (range) |"
echo "|---|---:|---|---:|---:|---:|---|"
awk '
  { k = $1 " " $2 " " $3; if ($5 + 0 > best[k, $4]) best[k, $4] = $5 + 0; keys[k] = 1; if (!(k in order)) order[k] = NR
    tps[k, $6, $4] = $5 + 0; rounds[$6] = 1 }
  # The median and range of the rounds ratios of key k, as text.
  function round_ratios(k,    r, n, v, i, j, tmp) {
    n = 0
    for (r in rounds) if (tps[k, r, "llama.cpp"] > 0 && tps[k, r, "shardlm"] > 0) v[++n] = tps[k, r, "shardlm"] / tps[k, r, "llama.cpp"]
    if (n == 0) return "-"
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j] < v[j - 1]; j--) { tmp = v[j]; v[j] = v[j - 1]; v[j - 1] = tmp }
    return sprintf("%.2f (%.2f-%.2f)", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, v[1], v[n])
  }
  END {
    n = 0; for (k in keys) sorted[++n] = k
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (order[sorted[j]] < order[sorted[i]]) {
      tmp = sorted[i]; sorted[i] = sorted[j]; sorted[j] = tmp }
    for (i = 1; i <= n; i++) {
      k = sorted[i]; split(k, f, " "); l = best[k, "llama.cpp"]; s = best[k, "shardlm"]
      printf "| %s | %s | %s | %.1f | %.1f | %s | %s |\n", f[1], f[2], f[3], l, s, (l > 0 ? sprintf("%.2f", s / l) : "-"),
             round_ratios(k)
    }
  }' "$results"
