#!/usr/bin/env bash
# The main job on the bundled tiny model, from a fresh Debian 12 machine:
# a single-node run, then the same story from a local cluster (two workers
# and a coordinator as separate processes on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
./build/shardlm inspect models/stories260K.gguf
./build/shardlm run -m models/stories260K.gguf -p "Once upon a time" -n 120 --seed 42 --temp 0 | tee /tmp/shardlm-demo-single.txt

export SHARDLM_TOKEN="demo-$RANDOM-$RANDOM"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
for i in 0 1; do
  ./build/shardlm worker --listen 127.0.0.1:0 --port-file "$work/port$i" --probe-mib 16 2>"$work/worker$i.log" &
  pids+=($!)
done
for i in 0 1; do while [ ! -s "$work/port$i" ]; do sleep 0.1; done; done
nodes="127.0.0.1:$(cat "$work/port0"),127.0.0.1:$(cat "$work/port1")"
echo "== the same prompt on a local cluster: --nodes $nodes =="
./build/shardlm run -m models/stories260K.gguf -p "Once upon a time" -n 120 --seed 42 --temp 0 -t 1 --nodes "$nodes" --tp 2 --pp 1 |
  tee /tmp/shardlm-demo-cluster.txt
if cmp -s /tmp/shardlm-demo-single.txt /tmp/shardlm-demo-cluster.txt; then
  echo "== the cluster told the same story as the single node =="
else
  echo "== the cluster's story differs from the single node's ==" >&2
  exit 1
fi
./build/shardlm bench kernels --quick
