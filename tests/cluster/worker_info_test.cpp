// The worker's Info as the coordinator and the planner read it: a worker of
// another build (another frame protocol) is refused by name before any job.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cluster/ask.h"
#include "cluster/protocol.h"
#include "core/error.h"

namespace shardlm::cluster {
namespace {

nlohmann::json info(nlohmann::json protocol) {
  nlohmann::json j = {{"memory_bytes", int64_t(8) << 30}, {"cores", 4}, {"bandwidth_gbs", 20.0}, {"version", "0.0.9"}};
  if (!protocol.is_null()) j["protocol"] = protocol;
  return j;
}

std::string error_of(const nlohmann::json& j) {
  try {
    (void)node_from_info("10.0.0.7:7070", j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WorkerInfo, SameProtocolIsRead) {
  const auto n = node_from_info("10.0.0.7:7070", info(kProtocol));
  EXPECT_EQ(n.cores, 4);
  EXPECT_EQ(n.memory_bytes, int64_t(8) << 30);
}

TEST(WorkerInfo, AnotherProtocolIsRefusedNamingTheWorker) {
  const std::string older = error_of(info(nullptr));  // builds before the field
  EXPECT_NE(older.find("worker 10.0.0.7:7070 speaks cluster protocol 1 (shardlm 0.0.9)"), std::string::npos) << older;
  EXPECT_NE(older.find("same shardlm build"), std::string::npos) << older;
  EXPECT_NE(error_of(info(kProtocol + 1)).find(fmt::format("protocol {}", kProtocol + 1)), std::string::npos);
  EXPECT_NE(error_of(info("two")).find("malformed Info"), std::string::npos) << error_of(info("two"));
}

// A peer's message nested deeper than a copy of it may recurse through is
// refused before it is parsed.
TEST(WorkerInfo, AMessageNestedTooDeepIsRefused) {
  const std::string deep = "{\"a\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  const Message m{MsgType::Info, std::vector<uint8_t>(deep.begin(), deep.end())};
  std::string what;
  try {
    (void)m.json();
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("Info message nests arrays and objects more than 128 deep"), std::string::npos) << what;
  const std::string fine = "{\"a\": " + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_EQ(Message({MsgType::Info, std::vector<uint8_t>(fine.begin(), fine.end())}).json().size(), 1u);
}

}  // namespace
}  // namespace shardlm::cluster
