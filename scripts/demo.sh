#!/usr/bin/env bash
# The main job on the bundled tiny model, from a fresh Debian 12 machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
./build/shardlm inspect models/stories260K.gguf
./build/shardlm run -m models/stories260K.gguf -p "Once upon a time" -n 120 --seed 42
./build/shardlm bench kernels --quick
