#!/usr/bin/env bash
# Installs every package shardlm needs to build, test and benchmark (Debian 12).
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config git ccache
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libfmt-dev libspdlog-dev libpcre2-dev libssl-dev
  libgtest-dev libgmock-dev
  openmpi-bin libopenmpi-dev
  clang libclang-rt-14-dev   # libFuzzer harness (scripts/fuzz.sh)
  iproute2 procps
  nodejs   # the serve test's openai client (tests/serve/client)
)
# npm comes with some Node builds (nodesource) and is a package of its own in Debian.
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  SUDO=""
  if [[ $(id -u) != 0 ]]; then SUDO=sudo; fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The serve HTTP test's client: the official openai npm package, pinned by
# tests/serve/client/package-lock.json (needs Node 18+ and npm).
client="$(dirname "$0")/../tests/serve/client"
(cd "$client" && npm ci --no-audit --no-fund)
