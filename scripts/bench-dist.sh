#!/usr/bin/env bash
# bench-dist.sh [BUILD_DIR] [MODEL]: the distributed table of docs/BENCHMARKS.md
# for one model (default: the synth Llama-3.2-1B Q4_0 that bench-models.sh
# writes). Local ranks as forked processes: 1 rank × 1 and × 2 threads, tp 2
# (tcp and shm), pp 2 with 1 and 4 sequences, tp 2 and pp 2 with each
# compressed wire type (--wire-type), each with the plan's prediction (from
# kernel rates `bench dist` measures before it starts the ranks).
# $BANDWIDTH: GB/s per rank for matrices of types nothing measured. One
# prompt token, so every forward step (and its wire bytes) is a decode step.
# $ROUNDS (default 1): run the whole list that many times, then print each
# row's best round (most tok/s, with that round's own plan: on a shared
# machine the best round is the least disturbed one) and plan / measured.
# Then tp 2 (tcp, shm) against one rank × 2 threads in $PAIRS (default 12)
# alternated pairs of bursts in one run (`--paired`): this host's speed
# swings by a third between runs, so that ratio is the one to trust.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
model=${2:-/tmp/shardlm-bench/l1b-q4_0.gguf}
shardlm="$build/shardlm"
[ -x "$shardlm" ] || { echo "no $shardlm: build it first (scripts/build.sh $build)" >&2; exit 1; }
[ -f "$model" ] || { echo "no $model: make it with scripts/bench-models.sh or shardlm synth" >&2; exit 1; }
gen=${GEN:-64}
bw=${BANDWIDTH:-16}

echo "machine: $(uname -m), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); model $model; gen $gen; plan bandwidth $bw GB/s"
rounds=${ROUNDS:-1}
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
row=0
run() {
  row=$((row + 1))
  echo "# round $round: $shardlm bench dist -m $model --prompt 1 --gen $gen --bandwidth $bw $*" >&2
  "$shardlm" bench dist -m "$model" --prompt 1 --gen "$gen" --bandwidth "$bw" "$@" | while IFS= read -r line; do
    case "$line" in
      "| layout"*) [ -s "$rows" ] || echo "0 $line" >>"$rows" ;;
      "|---"*) ;;
      "|"*) echo "$row $line" >>"$rows"; [ "$rounds" = 1 ] || echo "$line" >&2 ;;
    esac
  done
}
for round in $(seq 1 "$rounds"); do
  row=0
  echo "# round $round, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  run --tp 1 --threads 1
  run --tp 1 --threads 2
  run --tp 1 --threads 1 --seqs 4
  run --tp 2
  run --tp 2 --backend shm
  run --pp 2
  run --pp 2 --seqs 4
  for w in f16 bf16 q8_0; do run --tp 2 --wire-type $w; done
  run --pp 2 --wire-type q8_0
done
# Per row the best round: column 5 of a table line is decode tok/s, the
# last filled one the plan.
awk -F'|' '$1 == "0 " { sub(/^0 /, ""); print $0 " plan / measured |"; sep = "|"; for (i = 1; i < NF; ++i) sep = sep "---|"; print sep; next }
           { split($1, k, " "); r = k[1]; if (!(r in best) || $5 + 0 > best[r] + 0) { best[r] = $5; line[r] = $0 } }
           END { for (r = 1; r in line; ++r) { l = line[r]; sub(/^[0-9]+ /, "", l); split(l, c, "|");
                                              printf "%s %.2f |\n", l, c[length(c) - 1] / c[5] } }' "$rows"
pairs=${PAIRS:-12}
for backend in tcp shm; do
  echo "# $shardlm bench dist -m $model --prompt 1 --gen 32 --tp 2 --backend $backend --paired $pairs" >&2
  "$shardlm" bench dist -m "$model" --prompt 1 --gen 32 --tp 2 --backend "$backend" --paired "$pairs" |
    sed -n "s/^(paired: \(.*\))$/tp 2 $backend, paired: \1/p"
done
