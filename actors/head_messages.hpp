#pragma once
// Messages between actors of the head process only (request actors, supervisor, core): they
// never cross the wire, so they are not registered for serialization.
#include "runtime/group_load.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dls::actors {

/// What a request actor's directory row shows. It travels typed and is written as JSON only
/// when someone lists the directory: a request changes state several times, and is listed
/// rarely or never.
struct request_details {
  std::string status;
  double tau = 0;
  int32_t tokens = 0, gen_length = 0, steps = 0, moves = 0, migrations = 0;
  std::string node, group;
  nlohmann::json migration_log;  // null, or the newest moves
  int32_t slo_ms = 0;            // 0: none
  int64_t arrival_unix_ms = 0;
  bool tau_pinned = false;
  double min_tau = 0;       // 0: no floor
  double deadline_ms = 0;   // 0: not known yet
  double slack_ms = 0;
  std::string next_step;    // empty until a group decided
  std::string snapshot_at;  // the node keeping its newest snapshot (ucx.snapshots: peer); empty: the head
  std::string resumed_from; // what its last re-placement resumed from; empty: never re-placed

  nlohmann::json to_json() const {
    nlohmann::json j{{"status", status}, {"tau", tau},     {"tokens", tokens}, {"gen_length", gen_length},
                     {"steps", steps},   {"node", node},   {"group", group},   {"moves", moves},
                     {"migrations", migrations}, {"arrival_unix_ms", arrival_unix_ms}, {"tau_pinned", tau_pinned}};
    if (!migration_log.is_null() && !migration_log.empty()) j["migration_log"] = migration_log;
    if (slo_ms > 0) j["slo_ms"] = slo_ms;
    if (min_tau > 0) j["min_tau"] = min_tau;
    if (deadline_ms > 0) j["deadline_ms"] = deadline_ms;
    if (!snapshot_at.empty()) j["snapshot_at"] = snapshot_at;
    if (!resumed_from.empty()) j["resumed_from"] = resumed_from;
    if (!next_step.empty()) {
      j["slack_ms"] = slack_ms;
      j["next_step"] = next_step;
    }
    return j;
  }
};

/// (request_row_atom, request id, state, request_details, answered): a request actor's
/// directory row, created by its first update.
using request_row_atom = caf::atom_constant<caf::atom("reqrow")>;

/// What a TP group's directory row shows: its last load report and where it runs. It travels
/// typed, like request_details, and is written as JSON only when someone lists the directory:
/// a group reports whenever its queue changes other than by an item the supervisor sent it.
struct group_details {
  runtime::group_load load;
  int32_t degree = 1;
  std::vector<int32_t> devices;
  uint64_t refused_at_placement = 0;

  nlohmann::json to_json() const {
    auto j = load.to_json();
    j["degree"] = degree;
    j["devices"] = devices;
    j["refused_at_placement"] = refused_at_placement;
    return j;
  }
};

/// (group_row_atom, row id, group_details): a TP group's load, from the supervisor.
using group_row_atom = caf::atom_constant<caf::atom("grprow")>;

}  // namespace dls::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::actors::request_details)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::actors::group_details)
