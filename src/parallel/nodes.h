// What the planner knows about each machine: from `--nodes host:port,...`
// (defaults below), a hostfile (same defaults), or a JSON description of
// hypothetical nodes, so that layouts can be planned without a network.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/kernel_rates.h"
#include "parallel/token_costs.h"

namespace shardlm::parallel {

struct NodeSpec {
  std::string name;                    // host:port, or a label for hypothetical nodes
  int64_t memory_bytes = 16ll << 30;   // usable for weights + KV cache
  double memory_bandwidth_gbs = 20;    // sustained read bandwidth: decode is bound by it
  int cores = 4;
  double link_latency_us = 100;        // one small message, one way
  double link_bandwidth_gbs = 1.25;    // 10 GbE
  KernelRates kernel_rates;            // measured matmul rates; empty: memory bandwidth stands in
  TokenCosts token_costs;              // measured per-token work besides the matrices; empty: estimated from bandwidth
};

// Defaults for a node known only by address. Loopback peers get the link of
// a local socket (≈10 µs, ≈4 GB/s) instead of a LAN's.
NodeSpec default_node(const std::string& address);

// "a:1,b:2" → one default node each. Throws Error naming an empty entry.
std::vector<NodeSpec> nodes_from_list(const std::string& comma_separated);
std::vector<NodeSpec> nodes_from_hostfile(const std::string& path);

// {"defaults": {...}, "nodes": [{"name": "a", "memory_gb": 16, "bandwidth_gbs": 40,
//   "cores": 8, "link_latency_us": 50, "link_bandwidth_gbs": 1.25, "count": 2,
//   "kernel_rates": {"Q4_0": [GB/s at 1, 2, 4, 8 tokens], ...},
//   "token_costs": {"vector_ns": 0.3, "kv_store_ns": 0.2, "attention_ns": 0.04}}, ...]}
// (or just the array). Unknown keys and out-of-range values are errors naming
// the file and the node.
std::vector<NodeSpec> nodes_from_json_file(const std::string& path);
std::vector<NodeSpec> nodes_from_json_text(const std::string& text, const std::string& where);

}  // namespace shardlm::parallel
