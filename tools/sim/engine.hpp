#pragma once
// Internal state of one simulation run (simulator.cpp: events and steps; sim_control.cpp:
// tau control, migration and reconfiguration ticks). Not part of the public interface.
#include "policies/co_run.hpp"
#include "policies/group_step.hpp"
#include "sim/rng.hpp"
#include "sim/simulator.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <queue>
#include <set>
#include <utility>
#include <vector>

namespace dls::sim::detail {

/// Wall time of f() in seconds: the simulator reports what its policies cost per decision.
template <class F>
double timed(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

enum class ev : std::uint8_t {
  step_done, reuse_done, migrate_arrive, tick_migration, tick_reconfig, regroup_done,
  reach_group,  // a request leaves the control plane (sim_cluster::control_plane)
  group_ready   // a group's actor has handled its requests' messages (control_plane.group_ms)
};

struct event {
  double t;
  std::uint64_t seq;   // insertion order breaks time ties, so runs are reproducible
  ev type;
  std::uint32_t a;
  std::uint32_t b;
  bool operator>(const event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

/// Per request, what only the simulator needs (the policy-visible part is a request_view).
struct req_rt {
  double deadline_s = 0;
  double tau_low = 1.0;        // request_view::tau_low when it last committed: its accuracy
  int tokens = 0;
  int steps = 0;
  int steps_left = 0;          // planned steps left in the current block at the current tau
  int migrations = 0;
  double finish_s = -1;
  double admit_s = -1;         // first admission to a group's active set
  double in_steps_s = 0;       // summed length of the steps it was in
  double alone_s = 0;          // ... had each held only its own item
  bool dropped = false;
  bool judged = false;         // a strict SLO's first group decision has seen it (decide_as_live)
  bool rejected = false;       // refused at arrival (on_miss: reject)
  int answer_blocks = 0;       // sim_request::answer_blocks
  bool leaving = false;        // chosen for migration, leaves at its group's step boundary
  std::uint8_t stream = 0;     // co-running: 1 in the running refresh step, 2 in the running reuse step
  int leave_to = -1;
  policy::transfer_cost leave_cost;
  rng draw{1};
};

struct sim_group {
  int id = 0;
  int node = 0;
  int tp = 1;
  bool alive = true;
  bool draining = false;
  bool busy = false;
  bool dirty = true;           // membership changed since the last tau control
  double step_s = 0;           // expected step time (predict.hpp)
  double tau_cap = 0.9;
  double last_control = -1e300;
  double kv_free = 0;
  std::vector<policy::request_view> active;
  std::vector<policy::request_view> queue;
  std::vector<std::uint64_t> fresh;  // first placements no decision has seen (group_snapshot::fresh)
  policy::load_forecast arrivals;  // requests that joined lately, for the tau cap (threshold.hpp)
  // The accuracy budget's running state for the requests this group holds, as each live group
  // keeps its own (actors/tp_group_state.hpp): a request enters it on joining and leaves it on going.
  policy::accuracy_ledger ledger;
  policy::group_load load;
  std::vector<int> batch;      // indices into `active` of the running step
  std::vector<double> shares;  // layer share of each batch entry (layer-split refresh)
  std::pair<double, int> placed_key{0, -1};
  // Co-running (the cluster's co_run model is not off): `busy` is the refresh stream, timed
  // fluidly since a reuse step beside it changes its rate; `version` discards the stale
  // step_done events of a re-timed refresh step.
  std::vector<std::uint64_t> refresh_ids;
  policy::batch_totals refresh_totals;
  double refresh_left_s = 0;   // the refresh step's time alone still to run, at full speed
  double refresh_rate = 1;     // progress per second while the current share holds
  double refresh_since = 0;    // when refresh_left_s was last brought up to date
  double refresh_start = 0;
  std::uint32_t version = 0;
  bool reuse_busy = false;
  // control_plane.contention: the group's steps (start, end) that end within its window
  std::deque<std::pair<double, double>> ran;
  double excess_s = 0;  // the running step's time beyond the profile's
  // control_plane.group_ms: the actor's work for requests that reached the group, done before
  // its next step can start, and whether it is doing that work now
  double actor_s = 0;
  bool actor_busy = false;
  bool reuse_whole = false;    // started with no refresh running: it holds the whole device
  double reuse_start = 0;
  std::vector<std::uint64_t> reuse_ids;
  policy::co_run_cost reuse_cost;
};

struct sim_node {
  std::vector<int> groups;     // alive group ids
  policy::partition layout;
  policy::partition target;    // non-empty while draining for a regroup
  bool regrouping = false;
  double last_change_s = -1e300;  // regroup finished; the node stays put for min_dwell_s
};

class engine {
 public:
  engine(const sim_cluster& c, const std::vector<sim_request>& in, const run_config& cfg);
  run_result run();

 private:
  using clock = std::chrono::steady_clock;
  // simulator.cpp
  void push(double t, ev type, std::uint32_t a = 0, std::uint32_t b = 0);
  void on_arrival(std::uint32_t id);
  void enter_control_plane(std::uint32_t id);
  void enqueue(int g, const policy::request_view& r);
  void start_step(int g);
  void run_batch(int g);  // starts the step of g.batch (with g.shares)
  void on_step_done(int g);
  void settle(int g);
  // co-running (simulator.cpp)
  void start_streams(int g);
  bool start_stream_step(int g, policy::step_kind kind, std::vector<std::uint64_t>& ids, policy::batch_totals& t);
  void on_stream_done(int g, bool refresh, std::uint32_t version);
  void retime_refresh(int g);
  void commit(policy::request_view& r);
  int plan_steps(req_rt& rt, int masks, double tau);
  void remove_active(int g, std::size_t idx);
  void touch(int g);
  int pick_group();
  bool idle() const;
  void finish_request(const policy::request_view& r);
  int make_group(int node, int tp);
  // sim_control.cpp
  void control(int g);
  void decide_as_live(int g);
  bool decides_as_live() const { return !co_run_ && sched_.refresh_split <= 0; }
  void leave_at_boundaries(int g);
  void tick_migration();
  void on_migrate_arrive(std::uint32_t id, int dst);
  void depart(int g, std::size_t idx);
  void depart_queued(int g, std::size_t idx);
  void send_away(policy::request_view r);
  std::vector<std::vector<policy::request_view>> held_;  // per group: active then queued (migration's input)
  void tick_reconfig();
  policy::forecast rate_forecast(std::size_t from, std::size_t to, double window_s, double end_s) const;
  std::vector<policy::partition> boot_layout();
  void maybe_regroup(int node);
  void on_regroup_done(int node);
  policy::batch_totals group_reference(const sim_group& g) const;
  // Steps per refresh step at tau: the refresh fraction the step-cost predictions take.
  double spb(double tau) const { return cl_.quality.steps_per_refresh(cl_.block_len, tau); }

  const sim_cluster& cl_;
  const std::vector<sim_request>& in_;
  run_config cfg_;
  policy::scheduler_config sched_;
  policy::threshold_config thr_;
  policy::group_policy live_policy_;  // sched_ and thr_ as a live group holds them (decide_step)
  policy::accuracy_ledger ledger_;  // settings of each group's ledger (budget, tau_ref)
  policy::reconfig_config rcfg_;
  policy::migration_config mcfg_;
  bool co_run_ = false;             // two step streams per group (cluster co_run model)
  double now_ = 0;
  std::uint64_t seq_ = 0;
  std::size_t next_arrival_ = 0;
  std::size_t in_system_ = 0;
  std::priority_queue<event, std::vector<event>, std::greater<event>> events_;
  std::vector<req_rt> rt_;
  std::vector<double> cp_free_;  // when each control-plane server is next free
  double contention_factor(sim_group& g);  // its engine's slowdown now (1 without the model)
  double predicted_utilization(sim_group& g);  // from its recent arrivals (policy::predicted_utilization)
  // What the groups decide with: the profile plus, with control_plane.contention, one moving
  // estimate of a step's excess over the profile for all groups (a live group keeps its own;
  // the clusters that model contention have one group). Steps last what cl_.cost says, stretched.
  policy::step_cost_model cost_;
  double overhead_est_s_ = 0;
  // actors/tp_group_step.cpp's overhead_weight: the weight of the last step in that estimate.
  static constexpr double live_overhead_weight = 0.05;
  std::vector<sim_group> groups_;
  std::vector<sim_node> nodes_;
  std::set<std::pair<double, int>> placement_;  // (requests per device, group id)
  std::vector<policy::request_view> pending_;   // no group accepts arrivals (all draining)
  std::vector<policy::request_view> pending_in_flight_;  // migrating, keyed by id
  run_stats stats_;
  std::vector<int> scratch_;
  std::vector<std::pair<std::uint64_t, double>> tau_before_;  // decide_as_live: (id, tau) inside a block
  std::vector<policy::request_view> candidates_;  // co-running: one stream's candidates
};

}  // namespace dls::sim::detail
