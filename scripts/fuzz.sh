#!/usr/bin/env bash
# Fuzzes the GGUF parser with libFuzzer + ASan + UBSan for N seconds (default 60).
# Usage: scripts/fuzz.sh [seconds]. Crashes land in build-fuzz/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
out=build-fuzz
mkdir -p "$out/corpus" "$out/crashes"

clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Isrc fuzz/gguf_fuzz.cpp src/gguf/*.cpp src/core/dtype.cpp -o "$out/gguf_fuzz"

# Seeds: the first 64 KiB of every small model (whole headers of most of them).
for dir in models; do
  [[ -d $dir ]] || continue
  while IFS= read -r -d '' f; do
    head -c 65536 "$f" > "$out/corpus/seed-$(basename "$f")"
  done < <(find "$dir" -name '*.gguf' -size -8M -print0)
done
cp fuzz/seeds/* "$out/corpus/" 2>/dev/null || true

"$out/gguf_fuzz" "$out/corpus" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
  -artifact_prefix="$out/crashes/" -print_final_stats=1
