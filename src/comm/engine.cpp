#include "comm/engine.h"

#include "core/error.h"

namespace shardlm::comm {

Engine::Engine(std::unique_ptr<Transport> transport, CommConfig config)
    : transport_(std::move(transport)), config_(config) {}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::execute(const std::function<void()>& op) {
  try {
    op();
  } catch (const Error& e) {
    transport_->abort(e.what());
    throw;
  }
}

void Engine::run(const std::function<void()>& op) {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    busy_ = true;
  }
  struct Release {
    Engine* e;
    ~Release() {
      {
        std::lock_guard lock(e->mu_);
        e->busy_ = false;
      }
      e->cv_.notify_all();
    }
  } release{this};
  execute(op);
}

Work Engine::submit(std::function<void()> op) {
  auto state = std::make_shared<Work::State>();
  {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { progress_loop(); });
    queue_.emplace_back(std::move(op), state);
  }
  cv_.notify_all();
  return Work(state);
}

void Engine::progress_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !busy_); });
    if (queue_.empty()) return;  // stopping with nothing left to do
    auto [op, state] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      execute(op);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard slock(state->mu);
      state->done = true;
      state->error = error;
    }
    state->cv.notify_all();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

void Work::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

}  // namespace shardlm::comm
