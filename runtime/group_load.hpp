#pragma once
// A TP group's load and step totals, reported to the supervisor when its queue changes other
// than by an item the supervisor sent (which it counts itself; `enqueued`), and, with notes of
// its requests' policy state, at most every 100 ms otherwise. It
// travels typed: the supervisor reads the fields placement and shedding need, and the JSON the
// directory shows is written once, at the head.
#include "runtime/request_progress.hpp"
#include "runtime/step_histogram.hpp"

#include <caf/meta/type_name.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dls::runtime {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_histogram& x) {
  return f(caf::meta::type_name("dls_step_histogram"), x.counts, x.count, x.sum_s);
}

struct group_load {
  double work = 0;     // remaining answer tokens queued
  int32_t queued = 0;  // requests the group holds, running and waiting (what placement balances)
  // Items the supervisor sent this group that have reached it (taken, refused or sent back):
  // the supervisor adds those it sent since to `queued`, so the group need not report each one.
  uint64_t enqueued = 0;
  uint64_t steps = 0;
  double step_wall_s = 0, engine_s = 0, policy_s = 0, policy_cpu_s = 0;
  double report_s = 0, report_cpu_s = 0;  // noting the requests' policy states (tell_progress), after each step is out
  double predicted_s = 0;  // the profile's time for the same steps: step_wall_s - this is what it misses
  double idle_with_work_s = 0;  // held requests with no step in flight (between steps, before the first)
  uint64_t decisions = 0;
  std::string policy;
  double tau_cap = 0, step_overhead_s = 0;
  double slo_step_overhead_s = 0;  // the fixed per-step overhead its SLOs count (its node's idle figure)
  step_histogram refresh, reuse;
  // Load shedding: refusals, when tau was first lowered and the first refusal came (group
  // clock, -1: not yet), the backlog, the reference tau and the grace in SLO windows.
  uint64_t refused = 0;
  uint64_t rejected_on_miss = 0;  // strict SLOs refused (on_miss: reject), apart from shedding
  double lowest_tau = 1, first_tau_lowered_s = -1, first_refused_s = -1, backlog_s = 0, tau_ref = 1,
         shed_grace = 1;
  bool sheds = false;
  uint64_t migrations_in = 0, migrations_out = 0;
  // The data plane: KV caches this group sent, imported, and refused (then rebuilt).
  uint64_t kv_sent = 0, kv_imported = 0, kv_refused = 0;
  uint64_t snapshots_to_peer = 0;  // recovery snapshots sent to the node's keeper (ucx.snapshots: peer)
  // Prompts the group tokenized since it started, in bytes and in tokens: the head, which does
  // not tokenize, turns the prompt bytes of its arrivals into tokens at this ratio.
  uint64_t prompt_bytes = 0, prompt_tokens = 0;
  // Downtimes of the migrations into the group by how they came (canvas, rebuild, transfer,
  // handover): canvas rows and ms from the source's stop to the end of the first step here
  // (what a mid-block move costs, a rebuild's refresh included) and to its start (when the
  // request runs again).
  std::map<std::string, std::vector<int32_t>> downtime_rows;
  std::map<std::string, std::vector<double>> downtime_ms;
  std::map<std::string, std::vector<double>> downtime_start_ms;  // ... to the start of that step
  // Requests whose policy state changed since the last report (not in the directory's view:
  // the supervisor hands each to its request actor).
  std::vector<progress_entry> progress;

  /// The directory's view of a tp_group row (docs/runtime.md, "The actor directory").
  nlohmann::json to_json() const {
    nlohmann::json down = nlohmann::json::object();
    for (const auto& [how, rows] : downtime_rows) {
      auto ms = downtime_ms.find(how);
      auto start = downtime_start_ms.find(how);
      if (ms == downtime_ms.end() || start == downtime_start_ms.end()) continue;
      auto& list = down[how] = nlohmann::json::array();
      for (std::size_t i = 0; i < rows.size() && i < ms->second.size() && i < start->second.size(); ++i)
        list.push_back({rows[i], ms->second[i], start->second[i]});
    }
    return {{"queue", queued},
            {"enqueued", enqueued},
            {"queued_tokens", work},
            {"prompt_bytes", prompt_bytes},
            {"prompt_tokens", prompt_tokens},
            {"steps", steps},
            {"step_wall_s", step_wall_s},
            {"engine_s", engine_s},
            {"predicted_s", predicted_s},
            {"idle_with_work_s", idle_with_work_s},
            {"policy_s", policy_s},
            {"policy_cpu_s", policy_cpu_s},
            {"report_s", report_s},
            {"report_cpu_s", report_cpu_s},
            {"decisions", decisions},
            {"policy", policy},
            {"tau_cap", tau_cap},
            {"step_overhead_s", step_overhead_s},
            {"slo_step_overhead_s", slo_step_overhead_s},
            {"step_time_s", {{"refresh", refresh.to_json()}, {"reuse", reuse.to_json()}}},
            {"refused", refused},
            {"rejected_on_miss", rejected_on_miss},
            {"lowest_tau", lowest_tau},
            {"first_tau_lowered_s", first_tau_lowered_s},
            {"first_refused_s", first_refused_s},
            {"backlog_s", backlog_s},
            {"tau_ref", tau_ref},
            {"shed_grace", shed_grace},
            {"sheds", sheds},
            {"migrations_in", migrations_in},
            {"migrations_out", migrations_out},
            {"kv_sent", kv_sent},
            {"kv_imported", kv_imported},
            {"kv_refused", kv_refused},
            {"snapshots_to_peer", snapshots_to_peer},
            {"migration_downtime", down}};
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_load& x) {
  return f(caf::meta::type_name("dls_group_load"), x.work, x.queued, x.enqueued, x.steps, x.step_wall_s, x.engine_s, x.predicted_s, x.idle_with_work_s, x.policy_s,
           x.policy_cpu_s, x.report_s, x.report_cpu_s, x.decisions, x.policy, x.tau_cap, x.step_overhead_s, x.slo_step_overhead_s, x.refresh, x.reuse, x.refused,
           x.lowest_tau, x.first_tau_lowered_s, x.first_refused_s, x.backlog_s, x.tau_ref, x.shed_grace, x.sheds,
           x.migrations_in, x.migrations_out, x.rejected_on_miss, x.kv_sent, x.kv_imported, x.kv_refused, x.snapshots_to_peer, x.prompt_bytes, x.prompt_tokens,
           x.downtime_rows, x.downtime_ms, x.downtime_start_ms, x.progress);
}

}  // namespace dls::runtime
