#include "actors/directory.hpp"

namespace dls::actors {

uint64_t directory::add(runtime::actor_info row) {
  row.id = next_id_++;
  if (row.state.empty()) row.state = "ALIVE";
  if (row.details.empty()) row.details = "{}";
  auto id = row.id;
  rows_.emplace(id, std::move(row));
  return id;
}

void directory::update(uint64_t id, const std::string& state, const std::string& details) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return;
  // Each entry into RESTARTING counts as one restart of that actor.
  if (state == "RESTARTING" && it->second.state != "RESTARTING") ++it->second.restarts;
  if (!state.empty()) it->second.state = state;
  if (!details.empty()) it->second.details = details;
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
  for (const auto& kv : rows_) out.push_back(kv.second);
  return out;
}

}  // namespace dls::actors
