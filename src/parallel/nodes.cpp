#include "parallel/nodes.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_nesting.h"
#include "core/text.h"

namespace shardlm::parallel {
namespace {

bool is_loopback(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || host == "[::1]";
}

double positive(const nlohmann::json& v, const std::string& where, const char* key, double limit) {
  if (!v.is_number()) throw Error(fmt::format("{}: '{}' must be a number", where, key));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x <= 0 || x > limit)
    throw Error(fmt::format("{}: '{}' = {} is outside (0, {}]", where, key, x, limit));
  return x;
}

// Applies the keys of `j` on top of `node`.
void apply_keys(NodeSpec& node, const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw Error(fmt::format("{}: expected an object", where));
  for (const auto& [key, v] : j.items()) {
    if (key == "name") {
      if (!v.is_string()) throw Error(fmt::format("{}: 'name' must be a string", where));
      node.name = v.get<std::string>();
    } else if (key == "memory_gb") {
      node.memory_bytes = int64_t(positive(v, where, "memory_gb", 1 << 20) * double(1ll << 30));
    } else if (key == "bandwidth_gbs") {
      node.memory_bandwidth_gbs = positive(v, where, "bandwidth_gbs", 1e5);
    } else if (key == "cores") {
      node.cores = int(positive(v, where, "cores", 1 << 16));
    } else if (key == "link_latency_us") {
      node.link_latency_us = positive(v, where, "link_latency_us", 1e7);
    } else if (key == "link_bandwidth_gbs") {
      node.link_bandwidth_gbs = positive(v, where, "link_bandwidth_gbs", 1e5);
    } else if (key == "kernel_rates") {
      node.kernel_rates = KernelRates::from_json(v, where);
    } else if (key == "token_costs") {
      node.token_costs = TokenCosts::from_json(v, where);
    } else if (key != "count") {
      throw Error(fmt::format("{}: unknown key '{}'", where, key));
    }
  }
}

}  // namespace

NodeSpec default_node(const std::string& address) {
  NodeSpec n;
  n.name = address;
  if (is_loopback(address)) {
    n.link_latency_us = 10;
    n.link_bandwidth_gbs = 4;
  }
  return n;
}

std::vector<NodeSpec> nodes_from_list(const std::string& list) {
  std::vector<NodeSpec> nodes;
  std::stringstream in(list);
  std::string item;
  for (int i = 0; std::getline(in, item, ','); ++i) {
    // "a:1, b:2" as written by hand: the spaces around an entry are not part of it.
    item = std::string(strip_blanks(item));
    if (item.empty()) throw Error(fmt::format("--nodes: entry {} is empty", i + 1));
    nodes.push_back(default_node(item));
  }
  if (nodes.empty()) throw Error("--nodes: no nodes given");
  return nodes;
}

// One "host[:port]" per line, '#' comments; the first is the coordinator.
std::vector<NodeSpec> nodes_from_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot read hostfile {}", path));
  std::vector<NodeSpec> nodes;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = std::string(strip_blanks(line.substr(0, line.find('#'))));
    if (line.empty()) continue;
    if (line.find_first_of(" \t") != std::string::npos)
      throw Error(fmt::format("hostfile {}:{}: expected one host[:port] per line", path, n));
    nodes.push_back(default_node(line));
  }
  if (nodes.empty()) throw Error(fmt::format("hostfile {}: no hosts", path));
  return nodes;
}

std::vector<NodeSpec> nodes_from_json_text(const std::string& text, const std::string& where) {
  nlohmann::json j;
  if (json_nests_deeper_than(text))
    throw Error(fmt::format("{}: arrays and objects nested more than {} deep", where, kMaxJsonNesting));
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
  NodeSpec defaults;
  nlohmann::json list = j;
  if (j.is_object()) {
    if (j.contains("defaults")) apply_keys(defaults, j["defaults"], where + ": defaults");
    for (const auto& [key, v] : j.items())
      if (key != "defaults" && key != "nodes") throw Error(fmt::format("{}: unknown key '{}'", where, key));
    if (!j.contains("nodes")) throw Error(fmt::format("{}: no 'nodes' array", where));
    list = j["nodes"];
  }
  if (!list.is_array() || list.empty()) throw Error(fmt::format("{}: 'nodes' must be a non-empty array", where));
  std::vector<NodeSpec> nodes;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = fmt::format("{}: node {}", where, i);
    NodeSpec n = defaults;
    n.name = fmt::format("node{}", i);
    apply_keys(n, list[i], at);
    int count = 1;
    if (list[i].contains("count")) count = int(positive(list[i]["count"], at, "count", 1024));
    if (nodes.size() + size_t(count) > 4096) throw Error(fmt::format("{}: more than 4096 nodes", at));
    for (int c = 0; c < count; ++c) {
      nodes.push_back(n);
      if (count > 1) nodes.back().name = fmt::format("{}.{}", n.name, c);
    }
  }
  return nodes;
}

std::vector<NodeSpec> nodes_from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot read node description {}", path));
  std::stringstream text;
  text << in.rdbuf();
  return nodes_from_json_text(text.str(), path);
}

}  // namespace shardlm::parallel
