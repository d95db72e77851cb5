#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"shardlm: one LLM inference cluster from a handful of machines"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardlm 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });

  shardlm::cli::add_inspect(app);
  shardlm::cli::add_synth(app);
  shardlm::cli::add_run(app);
  shardlm::cli::add_serve(app);
  shardlm::cli::add_worker(app);
  shardlm::cli::add_plan(app);
  shardlm::cli::add_bench(app);
  shardlm::cli::add_template(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
