// What a TP group tells others: its load report to the supervisor, with the policy state of
// its requests for `status` and `actors`.
#include "actors/tp_group_state.hpp"

#include "policies/group_step.hpp"
#include "runtime/group_load.hpp"

#include <algorithm>
#include <unordered_set>

namespace dls::actors::tp_group_impl {

namespace {

// A change of only the next step kind is noted at most this often (the kind flips twice per
// block, and every note ends as a directory update at the head), and notes alone send a load
// report at most this often.
constexpr double kind_report_interval_s = 0.1;

}  // namespace

// A request's policy state now; the slack is the one at this moment.
rt::request_progress progress_now(const group_state& st, const queued_request& q, double now, double step_s) {
  rt::request_progress p;
  p.tau = q.live.tau;
  p.deadline_ms = 1e3 * (q.live.deadline_s - q.live.arrival_s);
  p.slack_ms = 1e3 * policy::slack_s(view_of(q.live), now, st.setup.policy->quality, step_s);
  p.next_kind = q.live.progress.next_refresh ? "refresh" : "reuse";
  return p;
}

void report_load(group_ptr self) {
  auto& st = self->state;
  if (!st.setup.supervisor) return;
  double work = 0;
  for (auto& [id, q] : st.queue) work += static_cast<double>(q.meta.gen_length - q.committed);
  // Step totals ride along so the directory (and bench-runtime) can show the share of
  // step time spent in actor messaging rather than in the engine.
  rt::group_load l;
  l.work = work;
  l.queued = static_cast<int32_t>(st.queue.size());
  l.enqueued = st.enqueued;
  l.prompt_bytes = st.prompt_bytes;
  l.prompt_tokens = st.prompt_tokens;
  l.steps = st.steps;
  l.step_wall_s = st.wall_seconds;
  l.idle_with_work_s = st.idle_with_work_seconds;
  l.engine_s = st.engine_seconds;
  l.predicted_s = st.predicted_seconds;
  l.policy_s = st.policy_seconds;
  l.policy_cpu_s = st.policy_cpu_seconds;
  l.report_s = st.report_seconds;
  l.report_cpu_s = st.report_cpu_seconds;
  l.decisions = st.decisions;
  l.policy = st.policy.name;
  l.tau_cap = st.view.tau_cap;
  l.step_overhead_s = st.overhead_s;
  l.slo_step_overhead_s = st.slo_overhead_s;
  l.refresh = st.refresh_steps;
  l.reuse = st.reuse_steps;
  l.refused = st.refused;
  l.rejected_on_miss = st.rejected_on_miss;
  l.lowest_tau = st.lowest_tau;
  l.first_tau_lowered_s = st.first_lowered_s;
  l.first_refused_s = st.first_refused_s;
  l.backlog_s = st.backlog_s;
  l.tau_ref = st.policy.thr.tau_max;
  l.shed_grace = st.policy.sched.missed_grace;
  l.sheds = st.policy.refuse_overload && st.cost.has_value();
  l.migrations_in = st.migrations_in;
  l.migrations_out = st.migrations_out;
  l.kv_sent = st.kv_sent;
  l.kv_imported = st.kv_imported;
  l.kv_refused = st.kv_refused;
  l.snapshots_to_peer = st.snapshots_to_peer;
  for (const auto& [how, samples] : st.downtime)
    for (const auto& d : samples) {
      l.downtime_rows[how].push_back(d.rows);
      l.downtime_ms[how].push_back(d.to_step_end_ms);
      l.downtime_start_ms[how].push_back(d.to_step_start_ms);
    }
  // The newest note of each request still here: an answer carries the last state of one that
  // finished, and an older note of the same request would be overwritten at the head anyway.
  std::unordered_set<uint64_t> noted;
  for (auto e = st.progress_out.rbegin(); e != st.progress_out.rend(); ++e)
    if (auto q = st.queue.find(e->request_id);
        q != st.queue.end() && q->second.meta.epoch == e->epoch && noted.insert(e->request_id).second)
      l.progress.push_back(std::move(*e));
  std::reverse(l.progress.begin(), l.progress.end());
  st.progress_out.clear();
  st.last_report_s = now_s(st);
  self->send(st.setup.supervisor, rt::load_atom::value, st.setup.name, std::move(l));
}

// Notes each request's policy state when its tau or next step kind changed (or on the first
// decision), so `actors` can show them without a message per step. The notes ride the next
// load report, which goes out at once when the last one is older than the kind's report
// interval: the head gets no message per request for them.
void tell_progress(group_ptr self, double now, double step_s, const std::vector<queued_request*>& which) {
  auto& st = self->state;
  for (auto* qp : which) {
    auto& q = *qp;
    const char* kind = q.live.progress.next_refresh ? "refresh" : "reuse";
    if (q.told_once && q.live.tau == q.told.tau &&
        (q.told.next_kind == kind || now - q.told_at_s < kind_report_interval_s))
      continue;
    q.told = progress_now(st, q, now, step_s);
    q.told_once = true;
    q.told_at_s = now;
    st.progress_out.push_back({q.meta.request_id, q.meta.epoch, q.told});
  }
  if (st.progress_out.empty()) return;
  const double wait_s = st.last_report_s + kind_report_interval_s - now;
  if (wait_s <= 0) {
    report_load(self);
  } else if (!st.report_due) {
    // A group that takes no further step (held, or waiting on a KV cache) sends them anyway.
    st.report_due = true;
    self->delayed_send(self, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(wait_s)),
                       report_atom::value);
  }
}

}  // namespace dls::actors::tp_group_impl
