#include "gpu/tp_runner.hpp"

#include "gpu/cpu_backend.hpp"

#include <stdexcept>
#include <string>

namespace dls::gpu {

tp_runner::tp_runner(std::shared_ptr<const model> m, int world)
    : world_(world), group_(world), slots_(static_cast<std::size_t>(world)),
      results_(static_cast<std::size_t>(world)), errors_(static_cast<std::size_t>(world)) {
  for (int r = 0; r < world; ++r) {
    endpoints_.push_back(group_.endpoint(r));
    engines_.push_back(std::make_unique<engine>(make_cpu_backend(m, {r, world}, endpoints_.back().get())));
  }
  for (int r = 1; r < world; ++r) threads_.emplace_back([this, r] { run_rank(r); });
}

tp_runner::~tp_runner() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::size_t tp_runner::admit(const canvas& c) {
  for (int r = 0; r < world_; ++r) slots_[static_cast<std::size_t>(r)].push_back(engines_[static_cast<std::size_t>(r)]->admit(c));
  return slots_[0].size() - 1;
}

void tp_runner::release(std::size_t handle) {
  if (handle >= slots_[0].size()) throw std::out_of_range("tp_runner: unknown request handle");
  for (auto& rank_slots : slots_) rank_slots[handle] = request_slot{};
}

void tp_runner::run_rank(int rank) {
  uint64_t seen = 0;
  while (true) {
    std::vector<std::size_t> job;
    std::vector<int> limits;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      limits = job_limits_;
    }
    std::vector<request_slot*> batch;
    auto& mine = slots_[static_cast<std::size_t>(rank)];
    for (auto h : job) batch.push_back(&mine[h]);
    std::string err;
    try {
      results_[static_cast<std::size_t>(rank)] = engines_[static_cast<std::size_t>(rank)]->step(batch, limits);
    } catch (const std::exception& e) {
      err = e.what();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      errors_[static_cast<std::size_t>(rank)] = err;
      --pending_;
    }
    cv_.notify_all();
  }
}

std::vector<step_report> tp_runner::step(const std::vector<std::size_t>& handles, const std::vector<int>& layer_limits) {
  for (auto h : handles) {
    if (h >= slots_[0].size()) throw std::out_of_range("tp_runner: unknown request handle");
    if (!slots_[0][h].cache) throw std::out_of_range("tp_runner: request handle " + std::to_string(h) + " was released");
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = handles;
    job_limits_ = layer_limits;
    pending_ = world_ - 1;
    ++generation_;
  }
  cv_.notify_all();
  std::vector<request_slot*> batch;
  for (auto h : handles) batch.push_back(&slots_[0][h]);
  std::string err0;
  try {
    results_[0] = engines_[0]->step(batch, layer_limits);
  } catch (const std::exception& e) {
    err0 = e.what();
  }
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return pending_ == 0; });
  }
  if (!err0.empty()) throw std::runtime_error(err0);
  for (const auto& e : errors_)
    if (!e.empty()) throw std::runtime_error(e);
  return results_[0];
}

}  // namespace dls::gpu
