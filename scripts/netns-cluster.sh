#!/usr/bin/env bash
# A cluster of N "machines" on one host (as root): network namespaces
# slm-ns0..N-1, each with a veth pair to the bridge slm-br0 (10.77.0.0/24,
# the host is 10.77.0.1), a `shardlm worker` in each. Prints the --nodes string.
#   sudo scripts/netns-cluster.sh up [N] [SHARDLM_BINARY]   (token: $SHARDLM_TOKEN)
#   sudo scripts/netns-cluster.sh down
# SHARDLM_NETNS_PREFIX / _SUBNET / _PROBE_MIB: names, first three octets, and
# each worker's --probe-mib (default 16).
set -euo pipefail
cmd=${1:-up}
n=${2:-2}
bin=${3:-$(cd "$(dirname "$0")/.." && pwd)/build/shardlm}
prefix=${SHARDLM_NETNS_PREFIX:-slm}
bridge="${prefix}-br0"
state="/tmp/${prefix}-netns-cluster"
port=7878
net=${SHARDLM_NETNS_SUBNET:-10.77.0}  # first three octets
probe_mib=${SHARDLM_NETNS_PROBE_MIB:-16}  # each worker's --probe-mib

down() {
  if [ -d "$state" ]; then
    for pidfile in "$state"/*.pid; do [ -e "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true; done
  fi
  for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}-ns" || true); do ip netns del "$ns" || true; done
  # The kernel tears a deleted namespace's veth pairs down later: a host end
  # still there would make the next `up` fail ("File exists").
  for link in $(ip -br link | awk '{print $1}' | cut -d@ -f1 | grep "^${prefix}-h" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$state"
}

up() {
  [ "$(id -u)" = 0 ] || { echo "netns-cluster: needs root (ip netns)" >&2; exit 1; }
  [ -x "$bin" ] || { echo "netns-cluster: no shardlm binary at $bin" >&2; exit 1; }
  [ -n "${SHARDLM_TOKEN:-}" ] || { echo "netns-cluster: set SHARDLM_TOKEN" >&2; exit 1; }
  down
  mkdir -p "$state"
  ip link add "$bridge" type bridge
  ip addr add ${net}.1/24 dev "$bridge"
  ip link set "$bridge" up
  nodes=""
  for i in $(seq 0 $((n - 1))); do
    ns="${prefix}-ns$i"
    ip netns add "$ns"
    ip link add "${prefix}-h$i" type veth peer name "${prefix}-n$i"
    ip link set "${prefix}-h$i" master "$bridge" up
    ip link set "${prefix}-n$i" netns "$ns"
    ip -n "$ns" addr add "${net}.$((i + 10))/24" dev "${prefix}-n$i"
    ip -n "$ns" link set "${prefix}-n$i" up
    ip -n "$ns" link set lo up
    ip netns exec "$ns" env SHARDLM_TOKEN="$SHARDLM_TOKEN" "$bin" worker --listen "${net}.$((i + 10)):$port" \
      --probe-mib "$probe_mib" >"$state/worker$i.log" 2>&1 &
    echo $! >"$state/worker$i.pid"
    nodes="${nodes:+$nodes,}${net}.$((i + 10)):$port"
  done
  # A worker measures its bandwidth and kernel rates before it listens:
  # ~1 s in a Release build, 6-12 s (probe 1-16 MiB) under AddressSanitizer,
  # longer with other work on the cores.
  for i in $(seq 0 $((n - 1))); do
    for _ in $(seq 600); do grep -q listening "$state/worker$i.log" 2>/dev/null && break; sleep 0.1; done
    grep -q listening "$state/worker$i.log" 2>/dev/null ||
      { echo "netns-cluster: worker $i is not listening after 60 s: $(tail -n 3 "$state/worker$i.log")" >&2; exit 1; }
  done
  echo "$nodes"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up [N] [shardlm binary] | down" >&2; exit 2 ;;
esac
