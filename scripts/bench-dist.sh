#!/usr/bin/env bash
# bench-dist.sh [BUILD_DIR] [MODEL]: the distributed table of docs/BENCHMARKS.md
# for one model (default: the synth Llama-3.2-1B Q4_0 that bench-models.sh
# writes). Local ranks as forked processes: 1 rank × 1 and × 2 threads, tp 2
# (tcp and shm), pp 2 with 1 and 4 sequences, tp 2 and pp 2 with each
# compressed wire type (--wire-type), each with the plan's prediction (from
# kernel rates `bench dist` measures before it starts the ranks).
# $BANDWIDTH: GB/s per rank for matrices of types nothing measured. One
# prompt token, so every forward step (and its wire bytes) is a decode step.
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
header=0
run() {
  echo "# $shardlm bench dist -m $model --prompt 1 --gen $gen --bandwidth $bw $*" >&2
  "$shardlm" bench dist -m "$model" --prompt 1 --gen "$gen" --bandwidth "$bw" "$@" | while IFS= read -r line; do
    case "$line" in
      "| layout"*|"|---"*) [ $header -eq 0 ] && echo "$line" ;;
      "|"*) echo "$line" ;;
    esac
  done
  header=1
}
run --tp 1 --threads 1
run --tp 1 --threads 2
run --tp 1 --threads 1 --seqs 4
run --tp 2
run --tp 2 --backend shm
run --pp 2
run --pp 2 --seqs 4
for w in f16 bf16 q8_0; do run --tp 2 --wire-type $w; done
run --pp 2 --wire-type q8_0
