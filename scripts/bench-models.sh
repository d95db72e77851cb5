#!/usr/bin/env bash
# bench-models.sh [BUILD_DIR] [MODEL_DIR]: the single-node table of
# docs/BENCHMARKS.md. Writes random-weight GGUFs of Llama-3.2-1B shape (Q4_0,
# Q8_0, Q4_K) and Llama-3.1-8B shape (Q4_0) into MODEL_DIR once (0.7–4.7 GB
# each; never commit them), then runs `shardlm bench -m` on each at 1 and 2
# threads: prompt 512, decode 128, against the measured bandwidth bound.
# SHARDLM_BENCH_MODELS="l1b-q4_0 ..." picks a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dir=${2:-/tmp/shardlm-bench}
shardlm="$build/shardlm"
[ -x "$shardlm" ] || { echo "no $shardlm: build it first (scripts/build.sh $build)" >&2; exit 1; }
mkdir -p "$dir"

declare -A preset=([l1b-q4_0]="llama3.2-1b q4_0" [l1b-q8_0]="llama3.2-1b q8_0" [l1b-q4_k]="llama3.2-1b q4_k"
                   [l8b-q4_0]="llama3.1-8b q4_0")
models=${SHARDLM_BENCH_MODELS:-"l1b-q4_0 l1b-q8_0 l1b-q4_k l8b-q4_0"}

for m in $models; do
  [ -n "${preset[$m]:-}" ] || { echo "unknown model $m (know: ${!preset[*]})" >&2; exit 1; }
  read -r p t <<<"${preset[$m]}"
  [ -f "$dir/$m.gguf" ] || "$shardlm" synth --preset "$p" --type "$t" -o "$dir/$m.gguf"
done

echo "machine: $(uname -m), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
for m in $models; do
  echo
  echo "### $m: $shardlm bench -m $dir/$m.gguf -t 1,2 --prompt 512 --gen 128"
  "$shardlm" bench -m "$dir/$m.gguf" -t 1,2 --prompt 512 --gen 128
done
