#pragma once

namespace shardlm::cluster {
// Routes spdlog's default logger to stderr: stdout carries only the generated text.
void log_to_stderr();
}  // namespace shardlm::cluster
