#pragma once
// The head's actor directory: one row per actor of the cluster, like Ray's `list actors`.
// A finished request or a dead worker stays visible with state DEAD; finished requests
// leave it after the configured retention (count and age), so the head's memory does not
// grow with the number of requests served, and only their counts remain.
#include "actors/head_messages.hpp"
#include "runtime/messages.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace dls::actors {

/// Requests over the whole life of the head, including those no longer in the directory.
struct request_counts {
  uint64_t in_flight = 0;
  uint64_t finished = 0;  // answered
  uint64_t failed = 0;    // ended with an explicit error
  uint64_t retained = 0;  // finished or failed rows still in the directory
};

class directory {
 public:
  using clock = std::chrono::steady_clock;

  explicit directory(runtime::directory_retention retention = {}) : retention_(retention) {}

  /// Adds a row and returns its id (ids are never reused).
  uint64_t add(runtime::actor_info row);

  /// Changes state and/or details; empty strings keep the old value. A request row that
  /// becomes DEAD is counted (FINISHED or FAILED, from its details) and may push the
  /// oldest finished rows out.
  void update(uint64_t id, const std::string& state, const std::string& details, clock::time_point now = clock::now());

  /// A request actor's row, by request id: created (kind request, on the head, process `pid`)
  /// by its first update. `answered`: with state DEAD, counted as finished rather than failed.
  /// Returns the row id; 0 for an end repeated after the row ended (ignored).
  uint64_t update_request(uint64_t request_id, const std::string& state, request_details details, bool answered,
                      int32_t pid, clock::time_point now = clock::now());
  /// A request row's details, typed; nullptr for any other row.
  const request_details* request_of(uint64_t row_id) const;
  /// A TP group row's details from its newest load report; ignored for a row not listed.
  void update_group(uint64_t row_id, group_details details);
  /// A TP group row's details, typed; nullptr before its first load report and for any other row.
  const group_details* group_of(uint64_t row_id) const;
  /// The rows as stored: a request row's `details` is empty (request_of has them), and so is a
  /// group row's once it reported its load (group_of has them).
  const std::map<uint64_t, runtime::actor_info>& rows() const { return rows_; }

  /// Removes finished request rows older than the retention age; returns how many.
  std::size_t expire(clock::time_point now = clock::now());

  /// Marks every ALIVE row on `node` DEAD; returns how many changed.
  int mark_node_dead(const std::string& node);

  const runtime::actor_info* find(uint64_t id) const;
  runtime::actor_info* find(uint64_t id);
  /// Every row, request rows with their details written out as JSON.
  std::vector<runtime::actor_info> list() const;
  std::size_t size() const { return rows_.size(); }
  request_counts requests() const;

 private:
  void evict_over_count();
  void count_end(uint64_t id, bool answered, clock::time_point now);
  void erase(uint64_t id);

  runtime::directory_retention retention_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, runtime::actor_info> rows_;
  std::deque<std::pair<uint64_t, clock::time_point>> finished_rows_;  // oldest first
  std::map<uint64_t, uint64_t> live_requests_;  // request id -> row id, until the request ends
  std::map<uint64_t, request_details> request_details_;  // by row id
  std::map<uint64_t, group_details> group_details_;      // by row id
  uint64_t requests_ = 0, finished_ = 0, failed_ = 0;
};

}  // namespace dls::actors
