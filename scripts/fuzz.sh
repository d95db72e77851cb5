#!/usr/bin/env bash
# Fuzzes what shardlm reads from untrusted sources with libFuzzer + ASan + UBSan,
# N seconds a target (default 60): the GGUF parser; the chat template engine (a
# GGUF's tokenizer.chat_template) parsing and rendering a conversation, and a
# chat request's body becoming a template's context and rendered; and
# the decoders of what cluster peers send (engine steps, sampled tokens, a
# worker's kernel rates and token costs).
# Usage: scripts/fuzz.sh [seconds] [gguf|chat|wire]... Crashes land in build-fuzz/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=(gguf chat wire)
(($#)) && targets=("$@")
out=build-fuzz
mkdir -p "$out/crashes"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc)

for target in "${targets[@]}"; do
  corpus="$out/corpus-$target"
  mkdir -p "$corpus"
  case $target in
    gguf)
      clang++ "${flags[@]}" fuzz/gguf_fuzz.cpp src/gguf/*.cpp src/core/dtype.cpp -lfmt -o "$out/gguf_fuzz"
      # Seeds: the first 64 KiB of every small model (whole headers of most of them).
      while IFS= read -r -d '' f; do
        head -c 65536 "$f" > "$corpus/seed-$(basename "$f")"
      done < <(find models -name '*.gguf' -size -8M -print0)
      cp fuzz/seeds/gguf/* "$corpus/"
      max_len=65536 ;;
    chat)
      clang++ "${flags[@]}" fuzz/chat_fuzz.cpp \
        src/chat/{template,parser,lexer,interpreter,filters,methods,operators,value,globals,request_context}.cpp \
        src/tokenizer/unicode_text.cpp -lfmt -o "$out/chat_fuzz"
      cp tests/chat/data/*.jinja fuzz/seeds/chat/* "$corpus/"  # the real templates, a request body
      max_len=16384 ;;
    wire)
      # The decoders are compiled here, instrumented; what they pull in besides
      # (the kernel-rate measurement behind kernel_rates.cpp) comes from the
      # Release build's libraries, unchecked.
      scripts/build.sh build >/dev/null
      clang++ "${flags[@]}" fuzz/wire_fuzz.cpp src/parallel/{step_message,kernel_rates,token_costs}.cpp \
        build/src/core/libshardlm_core.a build/src/gguf/libshardlm_gguf.a build/src/core/libshardlm_core.a \
        -lspdlog -lfmt -lpthread -o "$out/wire_fuzz"
      cp fuzz/seeds/wire/* "$corpus/"  # a step, sampled tokens, rates, costs: one of each
      max_len=4096 ;;
    *) echo "scripts/fuzz.sh: unknown target '$target' (gguf, chat, wire)" >&2; exit 2 ;;
  esac
  "$out/${target}_fuzz" "$corpus" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$out/crashes/$target-" -print_final_stats=1
done
