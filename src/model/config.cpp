#include "model/config.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/arch_registry.h"

namespace shardlm {

ModelConfig ModelConfig::from_gguf(const gguf::File& f) {
  ModelConfig c;
  c.arch_name = f.require_string("general.architecture");
  const arch::Loader load = arch::find_loader(c.arch_name);
  if (!load)
    throw Error(fmt::format("{}: unsupported architecture '{}' (general.architecture); supported: {}", f.path(),
                            c.arch_name, arch::supported_names()));
  load(arch::ArchKeys(f, c.arch_name), c);
  return c;
}

std::string ModelConfig::summary() const {
  std::string s = fmt::format("{}: {} layers, n_embd {}, heads {}/{} (head_dim {}), n_ff {}, vocab {}, rope {} dims base {}{}{}{}",
                              arch_name, n_layer, n_embd, n_head, n_head_kv, head_dim_k, n_ff, n_vocab, rope.dims,
                              rope.freq_base, rope.style == RopeStyle::NeoxHalves ? " neox" : "",
                              rope.yarn ? fmt::format(" yarn x{}", 1 / rope.freq_scale) : "",
                              tied_output ? ", tied output" : "");
  if (latent_attention())
    s += fmt::format(", MLA latent {} q_lora {}", attention.latent.kv_lora_rank, attention.latent.q_lora_rank);
  if (has_experts())
    s += fmt::format(", experts {} used {} (ff {}){}", moe.n_expert, moe.n_expert_used, moe.n_ff_expert,
                     moe.n_shared ? fmt::format(" + {} shared", moe.n_shared) : "");
  return s;
}

}  // namespace shardlm
