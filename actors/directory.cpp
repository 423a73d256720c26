#include "actors/directory.hpp"

#include <nlohmann/json.hpp>

namespace dls::actors {

uint64_t directory::add(runtime::actor_info row) {
  row.id = next_id_++;
  if (row.state.empty()) row.state = "ALIVE";
  if (row.details.empty()) row.details = "{}";
  if (row.kind == "request") ++requests_;
  auto id = row.id;
  rows_.emplace(id, std::move(row));
  return id;
}

void directory::update(uint64_t id, const std::string& state, const std::string& details, clock::time_point now) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return;
  auto& row = it->second;
  bool ends = row.kind == "request" && state == "DEAD" && row.state != "DEAD";
  // Each entry into RESTARTING counts as one restart of that actor.
  if (state == "RESTARTING" && row.state != "RESTARTING") ++row.restarts;
  if (!state.empty()) row.state = state;
  if (!details.empty()) row.details = details;
  if (!ends) return;
  auto d = nlohmann::json::parse(row.details, nullptr, false);
  count_end(id, d.is_object() && d.value("status", "") == "FINISHED", now);
}

void directory::count_end(uint64_t id, bool answered, clock::time_point now) {
  ++(answered ? finished_ : failed_);
  finished_rows_.emplace_back(id, now);
  evict_over_count();
}

uint64_t directory::update_request(uint64_t request_id, const std::string& state, request_details details,
                                   bool answered, int32_t pid, clock::time_point now) {
  auto live = live_requests_.find(request_id);
  uint64_t id = 0;
  // A request's first update is never its end: an end for a request not live here repeats one.
  if (live == live_requests_.end() && state == "DEAD") return 0;
  if (live == live_requests_.end()) {
    id = add({0, "request", "request-" + std::to_string(request_id), "head", pid, "ALIVE", 0, ""});
    live = live_requests_.emplace(request_id, id).first;
  } else {
    id = live->second;
  }
  auto* row = &rows_.at(id);
  row->details.clear();
  if (state == "RESTARTING" && row->state != "RESTARTING") ++row->restarts;
  row->state = state;
  request_details_[id] = std::move(details);
  if (state != "DEAD") return id;
  live_requests_.erase(live);
  count_end(id, answered, now);
  return id;
}

void directory::erase(uint64_t id) {
  rows_.erase(id);
  request_details_.erase(id);
  group_details_.erase(id);
}

void directory::update_group(uint64_t row_id, group_details details) {
  auto it = rows_.find(row_id);
  if (it == rows_.end()) return;
  it->second.details.clear();
  group_details_[row_id] = std::move(details);
}

const group_details* directory::group_of(uint64_t row_id) const {
  auto it = group_details_.find(row_id);
  return it == group_details_.end() ? nullptr : &it->second;
}

const request_details* directory::request_of(uint64_t row_id) const {
  auto it = request_details_.find(row_id);
  return it == request_details_.end() ? nullptr : &it->second;
}

void directory::evict_over_count() {
  while (finished_rows_.size() > static_cast<std::size_t>(retention_.finished_requests)) {
    erase(finished_rows_.front().first);
    finished_rows_.pop_front();
  }
}

std::size_t directory::expire(clock::time_point now) {
  if (retention_.finished_age_s <= 0) return 0;
  auto cutoff = now - std::chrono::seconds(retention_.finished_age_s);
  std::size_t n = 0;
  while (!finished_rows_.empty() && finished_rows_.front().second < cutoff) {
    erase(finished_rows_.front().first);
    finished_rows_.pop_front();
    ++n;
  }
  return n;
}

int directory::mark_node_dead(const std::string& node) {
  int n = 0;
  for (auto& [id, row] : rows_)
    if (row.node == node && row.state != "DEAD" && row.kind != "request") {
      row.state = "DEAD";
      ++n;
    }
  return n;
}

const runtime::actor_info* directory::find(uint64_t id) const {
  auto it = rows_.find(id);
  return it == rows_.end() ? nullptr : &it->second;
}

runtime::actor_info* directory::find(uint64_t id) {
  auto it = rows_.find(id);
  return it == rows_.end() ? nullptr : &it->second;
}

std::vector<runtime::actor_info> directory::list() const {
  std::vector<runtime::actor_info> out;
  out.reserve(rows_.size());
  for (const auto& [id, row] : rows_) {
    out.push_back(row);
    if (auto* d = request_of(id))
      out.back().details = d->to_json().dump();
    else if (auto* g = group_of(id))
      out.back().details = g->to_json().dump();
  }
  return out;
}

request_counts directory::requests() const {
  request_counts c;
  c.finished = finished_;
  c.failed = failed_;
  c.in_flight = requests_ - finished_ - failed_;
  c.retained = finished_rows_.size();
  return c;
}

}  // namespace dls::actors
