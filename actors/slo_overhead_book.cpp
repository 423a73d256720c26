#include "actors/slo_overhead_book.hpp"

namespace dls::actors {

std::optional<double> slo_overhead_book::find(int workers) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_size_.find(workers);
  if (it == by_size_.end()) return std::nullopt;
  return it->second;
}

double slo_overhead_book::offer(int workers, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_size_.emplace(workers, seconds).first->second;
}

}  // namespace dls::actors
