#include "cluster/worker.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <thread>

#include "cluster/job_wire.h"
#include "cluster/protocol.h"
#include "comm/communicator.h"
#include "comm/tcp_handshake.h"
#include "core/error.h"
#include "core/membw.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "parallel/runtime.h"

namespace shardlm::cluster {
namespace fs = std::filesystem;
using comm::tcp::Fd;

int64_t memory_available_bytes() {
  if (const char* pretend = std::getenv("SHARDLM_WORKER_MEM_MIB")) return std::atoll(pretend) << 20;
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

namespace {

// The matrix the kernel rates are measured on (at most the bandwidth probe's size).
constexpr size_t kRateMatrixBytes = size_t(32) << 20;

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The shard file being received: a sparse file of the model's size.
class ShardWriter {
 public:
  ShardWriter(const fs::path& path, uint64_t file_size) : path_(path), size_(file_size) {
    fd_ = Fd(::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644));
    if (!fd_) throw Error(fmt::format("cannot create shard {}: {}", path.string(), std::strerror(errno)));
    if (::ftruncate(fd_.get(), off_t(file_size)) != 0)
      throw Error(fmt::format("cannot size shard {} to {} bytes: {}", path.string(), file_size, std::strerror(errno)));
  }
  // Data payload: records of (u64 offset, u64 length, bytes).
  void write_records(const std::vector<uint8_t>& p, const std::string& who) {
    size_t at = 0;
    while (at < p.size()) {
      uint64_t off = 0, len = 0;
      if (p.size() - at < 16) throw Error(fmt::format("{}: truncated Data record at byte {}", who, at));
      std::memcpy(&off, p.data() + at, 8);
      std::memcpy(&len, p.data() + at + 8, 8);
      at += 16;
      if (len > p.size() - at || off > size_ || len > size_ - off)
        throw Error(fmt::format("{}: Data record [{}, +{}) outside the message or the {}-byte shard", who, off, len,
                                size_));
      for (size_t done = 0; done < len;) {
        const ssize_t n = ::pwrite(fd_.get(), p.data() + at + done, len - done, off_t(off + done));
        if (n <= 0) throw Error(fmt::format("writing shard {}: {}", path_.string(), std::strerror(errno)));
        done += size_t(n);
      }
      at += len;
      received_ += len;
    }
  }
  uint64_t received() const { return received_; }
  void close() { fd_.reset(); }

 private:
  fs::path path_;
  uint64_t size_;
  Fd fd_;
  uint64_t received_ = 0;
};

struct JobSpec {
  int rank = 0, size = 0;
  std::string comm_address;
  parallel::Plan plan;
  parallel::RuntimeOptions runtime;
  std::string mode, local_path, key;
  uint64_t file_size = 0, shard_bytes = 0;
  int64_t memory_needed = 0;
};

JobSpec parse_job(const nlohmann::json& j, const std::string& who) {
  JobSpec s;
  try {
    s.rank = j.at("rank").get<int>();
    s.size = j.at("size").get<int>();
    s.comm_address = j.at("comm_address").get<std::string>();
    s.plan = plan_from_json(j.at("plan"), who);
    const auto& o = j.at("options");
    s.runtime.n_ctx = o.at("n_ctx").get<int64_t>();
    s.runtime.n_batch = o.at("n_batch").get<int64_t>();
    s.runtime.n_seq = 1;
    s.runtime.kv_type = o.at("kv_type").get<std::string>() == "f16" ? DType::F16 : DType::F32;
    s.runtime.threads = o.at("threads").get<int>();
    const auto& m = j.at("model");
    s.mode = m.at("mode").get<std::string>();
    s.local_path = m.value("path", "");
    s.key = m.value("key", "");
    s.file_size = m.at("file_size").get<uint64_t>();
    s.shard_bytes = m.at("shard_bytes").get<uint64_t>();
    s.memory_needed = j.at("memory_needed").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed Job message: {}", who, e.what()));
  }
  if (s.size < 2 || s.size != s.plan.size() + 1 || s.rank < 1 || s.rank >= s.size)
    throw Error(fmt::format("{}: Job rank {} of {} does not match a plan of {} ranks", who, s.rank, s.size,
                            s.plan.size()));
  if (s.runtime.n_ctx < 1 || s.runtime.n_ctx > (int64_t(1) << 24) || s.runtime.n_batch < 1 ||
      s.runtime.n_batch > 65536 || s.runtime.threads < 0 || s.runtime.threads > 1024)
    throw Error(fmt::format("{}: Job options out of range", who));
  if (s.mode != "stream" && s.mode != "local") throw Error(fmt::format("{}: unknown model mode '{}'", who, s.mode));
  if (s.key.size() != 64 || s.key.find_first_not_of("0123456789abcdef") != std::string::npos) {
    if (s.mode == "stream") throw Error(fmt::format("{}: bad shard key '{}'", who, s.key));
  }
  return s;
}

// Driver of the workers' runtime: takes each request from the coordinator and
// streams every token back to it. Returns where this rank's time went, per request.
std::vector<RequestStats> drive(comm::Communicator& world, comm::Communicator& workers,
                                parallel::DistributedSession& session, int64_t n_ctx) {
  using Clock = std::chrono::steady_clock;
  std::vector<RequestStats> per_request;
  for (;;) {
    WireRequest r;
    if (world.recv(0, kTagRequest, &r, sizeof r) != sizeof r) throw Error("coordinator: short request");
    if (r.n_tokens != 0 && (r.n_tokens < 1 || r.n_tokens >= n_ctx || r.n_tokens > kMaxPromptTokens || r.n_predict < 0))
      throw Error(fmt::format("coordinator: request of {} prompt tokens does not fit --ctx {}", r.n_tokens, n_ctx));
    int32_t more = r.n_tokens > 0;
    workers.broadcast(&more, sizeof more, 0);
    if (!more) return per_request;
    std::vector<TokenId> prompt(size_t(r.n_tokens));
    if (world.recv(0, kTagRequest, prompt.data(), prompt.size() * sizeof(TokenId)) != prompt.size() * sizeof(TokenId))
      throw Error("coordinator: short prompt");
    parallel::GenerateRequest q;
    q.prompts.push_back(std::move(prompt));
    q.n_predict = r.n_predict;
    q.eos = r.eos;
    q.sampling = r.sampling;
    // Test hook: slows generation down so a test can kill a worker mid-way.
    const char* delay = std::getenv("SHARDLM_WORKER_TOKEN_DELAY_MS");
    const auto pause = std::chrono::milliseconds(delay ? std::atoi(delay) : 0);
    // Both parts' totals from this clock, so that they add up to the request.
    const auto t0 = Clock::now();
    const auto since_t0 = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    RequestStats stats;
    session.generate(q, [&](int seq, TokenId token) {
      if (!stats.to_first_token) {
        stats.to_first_token = session.stats();
        stats.to_first_token->total_seconds = since_t0();
      }
      if (pause.count() > 0) std::this_thread::sleep_for(pause);
      WireToken t{seq, token};
      world.send(0, kTagToken, &t, sizeof t);
    });
    WireToken end{-1, -1};
    world.send(0, kTagToken, &end, sizeof end);
    stats.total = session.stats();
    stats.total.total_seconds = since_t0();
    // Ending the followers' serve() after every request puts a boundary in every rank's stats.
    session.shutdown();
    if (per_request.size() < kMaxReportedRequests) per_request.push_back(stats);
    session.reset_stats();
  }
}

// The other workers: serve the driver's requests one at a time, as long as it says there are more.
std::vector<RequestStats> follow(comm::Communicator& workers, parallel::DistributedSession& session) {
  std::vector<RequestStats> per_request;
  for (;;) {
    int32_t more = 0;
    workers.broadcast(&more, sizeof more, 0);
    if (!more) return per_request;
    session.serve();
    if (per_request.size() < kMaxReportedRequests) per_request.push_back({session.stats(), std::nullopt});
    session.reset_stats();
  }
}

}  // namespace

Worker::Worker(WorkerOptions options) : opt_(std::move(options)) {
  auto where = comm::tcp::parse_host_port(opt_.listen, "--listen");
  Fd listener = comm::tcp::listen_on(where);
  port_ = comm::tcp::local_port(listener.get());
  listen_fd_ = listener.release();
  info_.memory_available = memory_available_bytes();
  info_.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  info_.bandwidth_gbs = opt_.probe_bytes ? measure_read_bandwidth(opt_.probe_bytes, nullptr, 2) : 0;
  info_.host = host_name();
  if (opt_.probe_bytes) {
    ThreadPool pool(info_.cores);
    info_.kernel_rates = parallel::measure_kernel_rates(parallel::common_weight_types(), info_.cores > 1 ? &pool : nullptr,
                                                        std::min(opt_.probe_bytes, kRateMatrixBytes));
  }
  if (!opt_.cache_dir.empty()) fs::create_directories(opt_.cache_dir);
  spdlog::info("worker: listening on {}:{}; {} cores, MemAvailable {:.0f} MiB, read bandwidth {:.1f} GB/s",
               where.host.empty() ? "*" : where.host, port_, info_.cores, double(info_.memory_available) / (1 << 20),
               info_.bandwidth_gbs);
  if (!opt_.port_file.empty()) {
    const std::string tmp = opt_.port_file + ".tmp";
    std::ofstream(tmp) << port_ << "\n";
    fs::rename(tmp, opt_.port_file);
  }
}

void Worker::serve() {
  for (int jobs = 0; opt_.max_jobs < 0 || jobs < opt_.max_jobs; ++jobs) {
    Fd c;
    while (!c) c = comm::tcp::accept_until(listen_fd_, after_seconds(3600));
    serve_job(c.release());
    spdlog::info("worker: idle");
  }
}

void Worker::serve_job(int raw_fd) {
  Fd fd(raw_fd);
  const std::string peer = "coordinator " + comm::tcp::peer_address(fd.get());
  fs::path shard_path, temp_dir, part;
  std::unique_ptr<Channel> ch;
  try {
    comm::tcp::set_nonblocking(fd.get());
    comm::tcp::tune_stream(fd.get());
    comm::tcp::HandshakeParams hp;
    hp.token = opt_.token;
    hp.cluster_id = kClusterId;
    comm::tcp::handshake(fd.get(), comm::tcp::Role::Acceptor, hp, after_seconds(10), peer);
    spdlog::info("worker: {} authenticated", peer);
    ch = std::make_unique<Channel>(std::move(fd), peer);
    info_.memory_available = memory_available_bytes();
    ch->send_json(MsgType::Info,
                  {{"memory_bytes", info_.memory_available}, {"cores", info_.cores},
                   {"bandwidth_gbs", info_.bandwidth_gbs}, {"host", info_.host},
                   {"kernel_rates", info_.kernel_rates.to_json()}},
                  after_seconds(10));
    const JobSpec job = parse_job(ch->expect_json(MsgType::Job, after_seconds(120)), peer);
    spdlog::info("worker: job as rank {} of {}, {} slices ({:.1f} MiB, {})", job.rank, job.size,
                 job.plan.ranks[size_t(job.rank - 1)].to_string(), double(job.shard_bytes) / (1 << 20), job.mode);
    if (job.memory_needed > info_.memory_available)
      throw Error(fmt::format("worker {}: not enough memory: its slices and KV cache need {:.1f} MiB, MemAvailable is "
                              "{:.1f} MiB",
                              info_.host, double(job.memory_needed) / (1 << 20),
                              double(info_.memory_available) / (1 << 20)));

    if (job.mode == "local") {
      shard_path = job.local_path;
    } else {
      const fs::path dir = opt_.cache_dir.empty() ? (temp_dir = fs::temp_directory_path() /
                                                               fmt::format("shardlm-worker-{}-{}", ::getpid(), port_))
                                                  : fs::path(opt_.cache_dir);
      fs::create_directories(dir);
      shard_path = dir / (job.key + ".gguf");
      if (!opt_.cache_dir.empty() && fs::exists(shard_path) && fs::file_size(shard_path) == job.file_size) {
        spdlog::info("worker: shard {} is cached, no transfer", shard_path.string());
        ch->send_json(MsgType::Status, {{"status", "have"}}, after_seconds(10));
      } else {
        ch->send_json(MsgType::Status, {{"status", "need"}}, after_seconds(10));
        part = shard_path.string() + ".part";
        ShardWriter w(part, job.file_size);
        for (;;) {
          Message m = ch->recv(after_seconds(120));
          if (m.type == MsgType::DataEnd) break;
          if (m.type != MsgType::Data) throw Error(fmt::format("{}: unexpected message during the transfer", peer));
          w.write_records(m.payload, peer);
          if (w.received() > job.shard_bytes)
            throw Error(fmt::format("{}: sent more than the announced {} bytes", peer, job.shard_bytes));
        }
        if (w.received() != job.shard_bytes)
          throw Error(fmt::format("{}: sent {} of the announced {} bytes", peer, w.received(), job.shard_bytes));
        w.close();
        fs::rename(part, shard_path);
        spdlog::info("worker: received {:.1f} MiB of slices", double(w.received()) / (1 << 20));
      }
    }
    auto file = gguf::File::open(shard_path.string());
    if (file->file_size() != job.file_size)
      throw Error(fmt::format("worker {}: {} has {} bytes, the coordinator's model {}", info_.host,
                              shard_path.string(), file->file_size(), job.file_size));
    ch->send_json(MsgType::Status, {{"status", "ready"}}, after_seconds(10));

    comm::ConnectOptions co;
    co.backend = "tcp";
    co.rank = job.rank;
    co.size = job.size;
    co.coordinator = job.comm_address;
    co.token = opt_.token;
    co.cluster_id = "shardlm-job";
    co.timeouts.op = std::chrono::seconds(120);
    auto world = comm::Communicator::connect(co);
    auto workers = world->split(0, job.rank);
    parallel::RuntimeOptions ro = job.runtime;
    if (ro.threads == 0) ro.threads = info_.cores;
    parallel::DistributedSession session(workers, job.plan, *file, ro);
    spdlog::info("worker: joined the job's communicator, model ready");
    const auto per_request = workers->rank() == 0 ? drive(*world, *workers, session, ro.n_ctx)
                                                   : follow(*workers, session);
    spdlog::info("worker: job done");
    nlohmann::json stats = nlohmann::json::array();
    for (const auto& s : per_request) stats.push_back(request_stats_to_json(s));
    ch->send_json(MsgType::Status, {{"status", "done"}, {"requests", stats}}, after_seconds(10));
  } catch (const std::bad_alloc&) {
    const std::string msg = fmt::format("worker {}: out of memory (std::bad_alloc)", info_.host);
    spdlog::error("{}", msg);
    if (ch) try { ch->send_json(MsgType::Status, {{"status", "error"}, {"message", msg}}, after_seconds(2)); } catch (...) {}
  } catch (const std::exception& e) {
    spdlog::error("worker: job failed: {}", e.what());
    if (ch) try { ch->send_json(MsgType::Status, {{"status", "error"}, {"message", e.what()}}, after_seconds(2)); } catch (...) {}
  }
  std::error_code ec;
  if (!part.empty()) fs::remove(part, ec);  // an interrupted transfer is never mistaken for a cached shard
  if (!temp_dir.empty()) fs::remove_all(temp_dir, ec);
}

}  // namespace shardlm::cluster
