// Paths to the shared test models and golden files, and a small runner that
// evaluates prompts and greedy continuations with a Model.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/sampler.h"
#include "test_paths.h"

namespace shardlm::test {

inline std::string shared_models() { return shardlm::test_paths::models_dir(); }

// The model file named by a golden file: in models/ or models/synthetic/.
inline std::string model_path(const std::string& file_name) {
  const std::string top = shared_models() + "/" + file_name;
  if (std::filesystem::exists(top)) return top;
  return shared_models() + "/synthetic/" + file_name;
}

inline std::string golden_path(const std::string& name) { return shared_models() + "/golden/" + name; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

inline std::vector<TokenId> ids_of(const nlohmann::json& j) { return j.get<std::vector<TokenId>>(); }

// One model with its own thread pool; threads == 1 means no pool.
struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Model> model;

  Loaded(const std::string& path, int threads, ModelOptions opt = {}) {
    file = gguf::File::open(path);
    if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
    opt.pool = pool.get();
    model = std::make_unique<Model>(*file, std::move(opt));
  }

  // Evaluates `ids` as one batch of sequence `seq` starting at position 0;
  // returns the logits of every position (all_logits) or of the last one.
  std::vector<std::vector<float>> prompt(const std::vector<TokenId>& ids, bool all_logits, int32_t seq = 0) {
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(seq, int32_t(i), ids[i], all_logits || i + 1 == ids.size());
    model->forward(b);
    std::vector<std::vector<float>> out;
    const size_t n = all_logits ? ids.size() : 1;
    for (size_t k = 0; k < n; ++k) {
      auto l = model->logits(k);
      out.emplace_back(l.begin(), l.end());
    }
    return out;
  }

  // Logits after one more token at `pos`.
  std::vector<float> step(TokenId token, int32_t pos, int32_t seq = 0) {
    Batch b;
    b.add(seq, pos, token, true);
    model->forward(b);
    auto l = model->logits(0);
    return {l.begin(), l.end()};
  }
};

}  // namespace shardlm::test
