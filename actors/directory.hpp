#pragma once
// The head's actor directory: one row per actor the cluster ever had, like Ray's
// `list actors`. Rows are never removed, so a finished request or a dead worker stays
// visible with state DEAD.
#include "runtime/messages.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dls::actors {

class directory {
 public:
  /// Adds a row and returns its id (ids are never reused).
  uint64_t add(runtime::actor_info row);

  /// Changes state and/or details; empty strings keep the old value.
  void update(uint64_t id, const std::string& state, const std::string& details);

  /// Marks every ALIVE row on `node` DEAD; returns how many changed.
  int mark_node_dead(const std::string& node);

  const runtime::actor_info* find(uint64_t id) const;
  runtime::actor_info* find(uint64_t id);
  std::vector<runtime::actor_info> list() const;

 private:
  uint64_t next_id_ = 1;
  std::map<uint64_t, runtime::actor_info> rows_;
};

}  // namespace dls::actors
