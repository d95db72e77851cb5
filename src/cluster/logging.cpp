#include "cluster/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace shardlm::cluster {

void log_to_stderr() {
  if (spdlog::get("shardlm")) return;
  const auto level = spdlog::get_level();
  auto logger = spdlog::stderr_color_mt("shardlm");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

}  // namespace shardlm::cluster
