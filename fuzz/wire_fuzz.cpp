// libFuzzer entry for what a peer sends over the network (nothing there is
// trusted): the first byte picks the decoder, the rest is its input. Every
// input must decode or raise shardlm::Error; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "parallel/kernel_rates.h"
#include "parallel/step_message.h"
#include "parallel/token_costs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlm;
  if (size == 0) return 0;
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0:  // a step of the workers' engine (broadcast, and the coordinator's Request frame)
        (void)parallel::StepMessage::decode(bytes, 8, 64, 512, 1000, "fuzz");
        break;
      case 1:  // the sampled tokens (Token frame, last stage → first)
        (void)parallel::decode_tokens(bytes, 8, 1000, "fuzz");
        break;
      default: {  // a worker's Info: its kernel rates, its token costs
        const auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
        if (j.is_discarded()) break;
        if (data[0] % 4 == 2) (void)parallel::KernelRates::from_json(j, "fuzz");
        else (void)parallel::TokenCosts::from_json(j, "fuzz");
        break;
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
