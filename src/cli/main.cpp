#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <exception>

#include "cli/commands.h"
#include "cli/usage.h"
#include "cluster/logging.h"
#include "cluster/protocol.h"
#include "core/error.h"
#include "parallel/planner.h"

int main(int argc, char** argv) {
  shardlm::cluster::log_to_stderr();
  CLI::App app{"shardlm: one LLM inference cluster from a handful of machines"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shardlm ") + shardlm::cluster::kVersion);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });

  shardlm::cli::add_inspect(app);
  shardlm::cli::add_synth(app);
  shardlm::cli::add_run(app);
  shardlm::cli::add_serve(app);
  shardlm::cli::add_worker(app);
  shardlm::cli::add_plan(app);
  shardlm::cli::add_status(app);
  shardlm::cli::add_bench(app);
  shardlm::cli::add_template(app);

  // llama.cpp's -cnv, which CLI11 would read as -c nv.
  static char conversation[] = "--conversation";
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "-cnv") == 0) argv[i] = conversation;
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "shardlm: error: %s\n", e.what());
    return 2;
  } catch (const shardlm::ReportedElsewhere& e) {
    return e.exit_status();
  } catch (const shardlm::cli::UsageError& e) {
    std::fprintf(stderr, "shardlm: error: %s\n", e.what());
    return 2;
  } catch (const shardlm::parallel::PlanRequestError& e) {
    std::fprintf(stderr, "shardlm: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
