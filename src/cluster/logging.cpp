#include "cluster/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace shardlm::cluster {

void log_to_stderr() {
  if (spdlog::get("shardlm-stderr")) return;
  spdlog::set_default_logger(spdlog::stderr_color_mt("shardlm-stderr"));
}

}  // namespace shardlm::cluster
