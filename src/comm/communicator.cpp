#include "comm/communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "comm/algorithms.h"
#include "comm/world_state.h"
#include "comm/reduce.h"
#include "comm/tuning.h"
#include "core/env.h"
#include "core/error.h"

namespace shardlm::comm {
namespace {

// Tag layout: context (32 bits) | collective bit | 31-bit sequence or user tag.
constexpr uint64_t kCollectiveBit = uint64_t(1) << 31;
constexpr uint32_t kMaxUserTag = (uint32_t(1) << 31) - 1;

uint32_t mix_context(uint32_t parent, uint32_t seq, int color) {
  uint64_t x = (uint64_t(parent) << 32) ^ (uint64_t(seq) << 16) ^ uint64_t(uint32_t(color));
  x += 0x9e3779b97f4a7c15ull;  // splitmix64 finalizer
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return uint32_t(x ^ (x >> 31)) | 1u;  // never 0, the world's context
}

}  // namespace

std::string_view algo_name(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::OneShot: return "oneshot";
    case AllReduceAlgo::RecursiveDoubling: return "recdbl";
    case AllReduceAlgo::Ring: return "ring";
    case AllReduceAlgo::Chain: return "chain";
    case AllReduceAlgo::HalvingDoubling: return "halving";
    case AllReduceAlgo::Native: return "native";
    default: return "auto";
  }
}

CommConfig CommConfig::from_env() {
  CommConfig c;
  if (const char* a = std::getenv("SHARDLM_ALLREDUCE_ALGO"); a && *a) {
    auto algo = algo_from_name(a);
    if (!algo)
      throw Error(fmt::format(
          "SHARDLM_ALLREDUCE_ALGO='{}' (want oneshot, recdbl, ring, chain, halving, native, auto)", a));
    c.algo = *algo;
  }
  c.small_bytes = env_bytes("SHARDLM_ALLREDUCE_SMALL_BYTES", c.small_bytes);
  c.ring_from_bytes = env_bytes("SHARDLM_ALLREDUCE_RING_FROM_BYTES", c.ring_from_bytes);
  c.chain_from_bytes = env_bytes("SHARDLM_ALLREDUCE_CHAIN_FROM_BYTES", c.chain_from_bytes);
  c.halving_below_bytes = env_bytes("SHARDLM_ALLREDUCE_HALVING_BELOW_BYTES", c.halving_below_bytes);
  c.ring_chunk_bytes = std::max<size_t>(env_bytes("SHARDLM_RING_CHUNK_BYTES", c.ring_chunk_bytes), 4096);
  c.tuning = TuningTable::load_default();
  c.tuning_from_file = true;
  return c;
}

std::shared_ptr<Communicator> Communicator::create(std::unique_ptr<Transport> transport,
                                                   CommConfig config) {
  Group world;
  world.my_index = transport->rank();
  for (int r = 0; r < transport->size(); ++r) world.ranks.push_back(r);
  const bool check_tuning = config.tuning_from_file && transport->size() > 1;
  auto state = std::make_shared<WorldState>(std::move(transport), config);
  auto comm = std::make_shared<Communicator>(std::move(state), std::move(world));
  if (check_tuning) comm->agree_on_tuning();
  return comm;
}

// Ranks that chose different algorithms for one all_reduce would wait on
// each other until the timeout: every rank must use the same table.
void Communicator::agree_on_tuning() {
  const std::string text = config().tuning ? config().tuning->to_text() : std::string();
  uint64_t mine = text.empty() ? 0 : 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : text) mine = (mine ^ ch) * 0x100000001b3ull;
  std::vector<uint64_t> all(static_cast<size_t>(size()));
  all_gather(&mine, all.data(), sizeof mine);
  if (std::all_of(all.begin(), all.end(), [&](uint64_t h) { return h == all[0]; })) return;
  if (rank() == 0)
    std::fprintf(stderr, "shardlm: warning: the ranks hold different comm tuning tables (%s); using the defaults\n",
                 TuningTable::default_path().c_str());
  world_->drop_tuning();
}

std::shared_ptr<Communicator> Communicator::connect(const ConnectOptions& options,
                                                    CommConfig config) {
  CommConfig c = config;
  c.timeouts = options.timeouts;
  return create(connect_transport(options), c);
}

Communicator::Communicator(std::shared_ptr<WorldState> world, Group group)
    : world_(std::move(world)), group_(std::move(group)) {}

Communicator::~Communicator() = default;

std::string_view Communicator::backend() const { return world_->transport().backend(); }
const CommConfig& Communicator::config() const { return world_->config(); }

uint64_t Communicator::next_collective_tag() {
  uint32_t seq = collective_seq_++ & kMaxUserTag;
  return (uint64_t(group_.context) << 32) | kCollectiveBit | seq;
}

uint64_t Communicator::user_tag(uint32_t tag) const {
  if (tag > kMaxUserTag) throw Error(fmt::format("comm: tag {} is above 2^31-1", tag));
  return (uint64_t(group_.context) << 32) | tag;
}

bool Communicator::loopback_links() const {
  for (int r = 0; r < size(); ++r)
    if (r != rank() && !world_->transport().shares_host(world_rank(r))) return false;
  return size() > 1;
}

AllReduceChoice Communicator::choose_all_reduce_choice(size_t bytes) const {
  const CommConfig& c = config();
  if (c.algo != AllReduceAlgo::Auto) return {c.algo, 0};
  const bool loopback = loopback_links();
  if (c.tuning)
    if (auto row = c.tuning->lookup(backend(), size(), loopback, bytes)) return *row;
  return default_all_reduce(c, backend(), size(), loopback, bytes);
}

AllReduceAlgo Communicator::choose_all_reduce(size_t bytes) const {
  return choose_all_reduce_choice(bytes).algo;
}

// ---- point to point ----------------------------------------------------------

static void check_rank(const Group& g, int r, const char* what) {
  if (r < 0 || r >= g.size())
    throw Error(fmt::format("comm: {} rank {} out of range (communicator size {})", what, r, g.size()));
}

void Communicator::send(int peer, uint32_t tag, const void* data, size_t bytes) {
  check_rank(group_, peer, "send to");
  uint64_t t = user_tag(tag);
  if (peer == rank()) throw Error("comm: send to self is not supported");
  world_->run([&] {
    RequestPtr r = world_->transport().isend(world_rank(peer), t, data, bytes);
    world_->transport().wait_all(std::span<const RequestPtr>(&r, 1), world_->deadline());
  });
}

size_t Communicator::recv(int peer, uint32_t tag, void* data, size_t capacity) {
  check_rank(group_, peer, "receive from");
  uint64_t t = user_tag(tag);
  if (peer == rank()) throw Error("comm: receive from self is not supported");
  size_t got = 0;
  world_->run([&] {
    RequestPtr r = world_->transport().irecv(world_rank(peer), t, data, capacity);
    world_->transport().wait_all(std::span<const RequestPtr>(&r, 1), world_->deadline());
    got = r->bytes();
  });
  return got;
}

// ---- sub-groups -----------------------------------------------------------------

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  const int n = size();
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(size_t(n) * 2);
  all_gather(mine, all.data(), sizeof mine);
  std::vector<int> members;  // old ranks with my color
  for (int r = 0; r < n; ++r)
    if (color >= 0 && all[size_t(r) * 2] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[size_t(a) * 2 + 1] < all[size_t(b) * 2 + 1];
  });
  Group child;
  child.context = mix_context(group_.context, split_seq_++, color);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank()) child.my_index = int(i);
    child.ranks.push_back(world_rank(members[i]));
  }
  if (color < 0) return nullptr;
  return std::make_shared<Communicator>(world_, std::move(child));
}

}  // namespace shardlm::comm
