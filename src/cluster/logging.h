#pragma once

namespace shardlm::cluster {
// Routes spdlog's default logger to stderr in the one format every subcommand
// uses ("[time] [level] message"): stdout carries only generated text and
// the output a subcommand is asked for.
void log_to_stderr();
}  // namespace shardlm::cluster
