// Each subcommand registers itself on the root CLI11 app. A callback throws
// shardlm::Error for anything the user got wrong; main prints it on one line.
#pragma once

#include <CLI/CLI.hpp>

namespace shardlm::cli {

void add_inspect(CLI::App& app);
void add_synth(CLI::App& app);
void add_run(CLI::App& app);
void add_serve(CLI::App& app);  // shardlm serve: OpenAI-compatible HTTP server
void add_worker(CLI::App& app);  // shardlm worker: serve cluster jobs
void add_plan(CLI::App& app);  // shardlm plan: a layout over nodes (live workers asked)
void add_status(CLI::App& app);  // shardlm status: how each worker is
void add_template(CLI::App& app);  // shardlm template: render a chat template
void add_bench(CLI::App& app);  // bench [model options] | bench kernels | bench comm
void add_bench_kernels(CLI::App& bench);
void add_bench_comm(CLI::App& bench);
void add_bench_dist(CLI::App& bench);   // bench dist: local ranks, tp/pp
void add_bench_serve(CLI::App& bench);  // bench serve: load an OpenAI-compatible server
void add_bench_model(CLI::App& bench);  // options on `bench` itself: -m MODEL ...

}  // namespace shardlm::cli
