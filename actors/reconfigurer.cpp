// The reconfigurer executes a split or merge of one node's devices: the supervisor stops
// placing there, the node's groups hand their requests at refresh boundaries to the
// supervisor for other nodes, and the node regroups its workers and resumes what it still
// held from its canvas. It regroups on command (`dilaserve reconfigure`) and, with
// `reconfigure: auto`, when its periodic call to the optimizer (policy::optimize_layout over
// the forecast of policy::forecast_from_arrivals) says nodes' layouts should change: the
// emptiest such nodes first, up to reconfigure.max_fraction of the nodes draining at once
// (policy::nodes_to_drain, policy::nodes_at_once), as the simulator drains; the optimizer's
// hysteresis and a minimum dwell per node keep it from flapping. On `dilaserve provision` it
// plans every node's layout from a history of arrivals (policy::provisioning_forecast) and
// regroups the nodes that differ in the same waves.
#include "actors/peer_roles.hpp"
#include "actors/spawn.hpp"
#include "policies/forecast.hpp"
#include "policies/presets.hpp"
#include "policies/quality.hpp"
#include "policies/reconfig.hpp"
#include "policies/step_cost.hpp"
#include "policies/threshold.hpp"
#include "runtime/log.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace dls::actors {

namespace rt = dls::runtime;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

// Automatic decisions `status` lists, the newest last.
constexpr std::size_t decisions_kept = 10;

struct reconfigurer_state {
  // Nodes being regrouped now: up to reconfigure.max_fraction of them at once by the automatic
  // regroups (policy::nodes_at_once); a `reconfigure` or a provisioning runs alone.
  std::set<std::string> regrouping;
  bool provisioning = false;
  uint64_t waves = 0;  // waves of nodes drained together (automatic looks, provisioning): a decision's `wave`
  bool busy() const { return provisioning || !regrouping.empty(); }
  uint64_t dir_id = 0;
  rt::cluster_config cfg;
  std::map<std::string, std::vector<int>> layout;           // each node's TP degrees now
  std::map<std::string, clock_type::time_point> changed_at; // its last regroup
  std::optional<policy::step_cost_model> cost;
  std::optional<policy::quality_model> quality;
  json decisions = json::array();
  json last;  // the last regroup's result
  uint64_t regroups = 0;  // completed ones since the head started (benchmarks and metrics count them)
  // The policy set the groups run, as of the last automatic look: only a set with
  // reconfiguration (dilaserve, reconfig-only and the ablations that keep it) regroups by itself.
  std::string policy;
  // The path overhead per request that the supervisor's deadlines count (seconds), as of the
  // last look at the load: the optimizer's deadlines count it too.
  double request_overhead_s = 0;
  static inline const char* name = "dls.reconfigurer";
};

std::string fail(const std::string& why) { return json{{"ok", false}, {"error", why}}.dump(); }

using reconf_ptr = caf::stateful_actor<reconfigurer_state>*;

// Shows a regroup in progress and the automatic decisions in the directory
// (`actors --kind reconfigurer`, `status`).
void publish(reconf_ptr self, const caf::actor& core) {
  auto& st = self->state;
  json d{{"busy", st.busy()},
         {"regrouping", st.regrouping},
         {"mode", st.cfg.reconfigure.automatic ? "auto" : "manual"},
         {"decisions", st.decisions},
         {"regroups", st.regroups}};
  if (!st.last.is_null()) d["last"] = st.last;
  if (!st.policy.empty()) {  // auto mode, after its first look at the load
    d["policy"] = st.policy;
    d["policy_reconfigures"] = policy::make_policy_set(st.policy).reconfigure;
  }
  if (st.dir_id) self->send(core, rt::detail_atom::value, st.dir_id, std::string{}, d.dump());
}

// The regroup of one node, as `dilaserve reconfigure` asks for it; `done` gets the JSON
// result. `alone`: only while no other node regroups (a command); the automatic regroups of
// one look run side by side.
void run_regroup(reconf_ptr self, caf::actor core, caf::actor supervisor, rt::regroup_spec spec,
                 std::function<void(std::string)> done_cb, bool alone = true) {
  auto& st0 = self->state;
  if ((alone && !st0.regrouping.empty()) || st0.regrouping.count(spec.node)) {
    done_cb(fail("another reconfiguration is running"));
    return;
  }
  st0.regrouping.insert(spec.node);
  auto start = clock_type::now();
  auto done = [=](std::string text) {
    auto& st = self->state;
    st.regrouping.erase(spec.node);
    st.last = json::parse(text, nullptr, false);
    if (st.last.is_object() && st.last.value("ok", false)) {
      ++st.regroups;
      st.layout[spec.node].assign(spec.groups.begin(), spec.groups.end());
      st.changed_at[spec.node] = clock_type::now();
    }
    publish(self, core);
    done_cb(std::move(text));
  };
  auto on_error = [=](caf::error& e) {
    // Whatever state the node is in, let the supervisor use its groups again.
    caf::anon_send(supervisor, rt::drain_atom::value, spec.node, false);
    done(fail(to_string(e)));
  };
  self->request(core, std::chrono::seconds(10), rt::check_atom::value, spec)
      .then(
          [=](const std::string& why, caf::actor agent) {
            if (!why.empty() || !agent) {
              done(fail(why.empty() ? "node has no agent" : why));
              return;
            }
            self->request(supervisor, std::chrono::seconds(10), rt::drain_atom::value, spec.node)
                .then(
                    [=](bool) {
                      publish(self, core);
                      self->request(agent, std::chrono::minutes(5), rt::regroup_atom::value, spec)
                          .then(
                              [=](std::vector<rt::group_info>& groups, const std::string& stats) {
                                self->request(core, std::chrono::seconds(10), rt::groups_atom::value, spec.node,
                                              groups, std::vector<rt::actor_info>{})
                                    .then(
                                        [=](std::vector<rt::group_info>& registered) {
                                          auto total = std::chrono::duration<double, std::milli>(
                                                           clock_type::now() - start)
                                                           .count();
                                          json j{{"ok", true}, {"node", spec.node}, {"total_ms", total}};
                                          j["node_stats"] = json::parse(stats, nullptr, false);
                                          j["groups"] = json::array();
                                          for (auto& g : registered)
                                            j["groups"].push_back({{"id", g.id},
                                                                   {"name", g.name},
                                                                   {"degree", g.degree},
                                                                   {"devices", g.devices}});
                                          rt::log_line("reconfigurer",
                                                       "regrouped node '" + spec.node + "': " + j.dump());
                                          done(j.dump());
                                        },
                                        on_error);
                              },
                              on_error);
                    },
                    on_error);
          },
          on_error);
}

std::string degrees_text(const std::vector<int>& d) {
  std::string s;
  for (int x : d) s += (s.empty() ? "" : ",") + std::to_string(x);
  return "{" + s + "}";
}

// The step-cost and quality models the optimizer plans with, read once from the cluster
// file; "" when they are there, else why not.
std::string load_models(reconfigurer_state& st) {
  if (st.cost && st.quality) return {};
  try {
    if (st.cfg.scheduler.profile_text.empty()) throw std::invalid_argument("no step-cost profile");
    st.cost = policy::parse_step_cost_profile(st.cfg.scheduler.profile_text);
    st.quality = st.cfg.scheduler.quality_text.empty()
                     ? policy::quality_model({{0.0, 1.0, 1.0}, {1.0, 1.0, 1.0}})
                     : policy::parse_quality_curve(st.cfg.scheduler.quality_text);
    st.quality->set_refresh_interval(st.cfg.engine.decode.refresh_period());
  } catch (const std::exception& e) {
    st.cost.reset();
    st.quality.reset();
    return e.what();
  }
  return {};
}

// The forecast's settings from the cluster file (the keys the simulator reads too).
policy::forecast_config forecast_settings(const reconfigurer_state& st) {
  const auto& rc = st.cfg.reconfigure;
  policy::forecast_config fc;
  fc.window_s = rc.window_ms / 1e3;
  fc.subwindow_s = rc.forecast_subwindow_ms / 1e3;
  fc.quantile = rc.forecast_quantile;
  fc.block_len = st.cfg.engine.decode.block_length;
  return fc;
}

// The optimizer's settings from the cluster file; `horizon_s`: how long the plan's gain is
// counted against a regroup's cost.
policy::reconfig_config planner_settings(const reconfigurer_state& st, double horizon_s) {
  const auto& rc = st.cfg.reconfigure;
  policy::reconfig_config rcfg;
  rcfg.slo_scale = st.cfg.scheduler.slo_scale;
  rcfg.request_overhead_s = st.request_overhead_s;
  rcfg.ref_tau = st.cfg.engine.decode.threshold;
  policy::threshold_config levels;
  levels.tau_max = st.cfg.engine.decode.threshold;
  levels.tau_min = std::min(st.cfg.scheduler.tau_min, st.cfg.engine.decode.threshold);
  levels.tau_step = st.cfg.scheduler.tau_step;
  levels.accuracy_budget = st.cfg.scheduler.accuracy_budget;
  rcfg.tau_levels = policy::planning_tau_levels(levels, *st.quality);
  rcfg.regroup_s = rc.regroup_ms / 1e3;
  rcfg.attainment_target = rc.attainment_target;
  rcfg.utilization_max = rc.utilization_max;
  rcfg.capacity_units = rc.capacity_units;
  rcfg.horizon_s = horizon_s;
  // Nodes that drain together (auto_tick, provision).
  rcfg.nodes_at_once = policy::nodes_at_once(st.cfg.reconfigure.max_fraction, st.cfg.nodes.size());
  rcfg.max_batch = st.cfg.engine.max_batch;
  rcfg.token_budget = st.cfg.scheduler.token_budget;
  return rcfg;
}

// Each node's devices, and its TP degrees now (largest first, as the optimizer writes them).
void layout_now(reconfigurer_state& st, std::vector<int>& devices, std::vector<policy::partition>& current) {
  for (const auto& n : st.cfg.nodes) {
    devices.push_back(n.devices.slots());
    auto p = st.layout[n.name];
    std::sort(p.begin(), p.end(), std::greater<int>());
    current.push_back(p);
  }
}

// Why the optimizer chose a layout, as `status` lists each decision.
json plan_reason(const policy::forecast& fc, const policy::reconfig_plan& plan, const policy::reconfig_config& rcfg) {
  return json{{"forecast_rps", fc.arrival_rate},
              {"mean_rps", fc.mean_rate},
              {"capacity_rps", plan.capacity_rps},
              {"predicted_latency_s", plan.latency_score},
              {"feasible", plan.feasible},
              {"burst", plan.burst},
              {"tau", plan.tau},
              {"request_overhead_ms", rcfg.request_overhead_s * 1e3}};
}

// Records a decision's outcome (`reason` plus ok and, on failure, the error of the regroup's
// answer `text`) among the last ones `status` lists; returns whether the regroup succeeded.
bool log_decision(reconf_ptr self, const caf::actor& core, json reason, const std::string& text) {
  auto& st = self->state;
  auto result = json::parse(text, nullptr, false);
  const bool ok = result.is_object() && result.value("ok", false);
  reason["ok"] = ok;
  if (!ok) reason["error"] = result.is_object() ? result.value("error", text) : text;
  st.decisions.push_back(reason);
  if (st.decisions.size() > decisions_kept) st.decisions.erase(st.decisions.begin());
  publish(self, core);
  return ok;
}

// How many more nodes the automatic regroups may drain now.
int drain_room(const reconfigurer_state& st) {
  if (st.provisioning) return 0;
  return policy::nodes_at_once(st.cfg.reconfigure.max_fraction, st.cfg.nodes.size()) -
         static_cast<int>(st.regrouping.size());
}

// One automatic look at the load: forecast, optimizer, and the nodes to regroup, at most
// reconfigure.max_fraction of them draining at once.
void auto_tick(reconf_ptr self, caf::actor core, caf::actor supervisor) {
  auto& st = self->state;
  const auto& rc = st.cfg.reconfigure;
  self->delayed_send(self, std::chrono::milliseconds(rc.interval_ms), rt::beat_atom::value);
  if (drain_room(st) <= 0 || !st.cost || !st.quality) return;
  self->request(supervisor, std::chrono::seconds(10), rt::load_atom::value)
      .then(
          [=](const std::vector<double>& v, const std::string& policy_name, const std::map<std::string, int32_t>& held,
              double overhead_ms) {
            auto& st = self->state;
            st.request_overhead_s = std::max(0.0, overhead_ms) / 1e3;
            if (policy_name != st.policy) {
              st.policy = policy_name;
              publish(self, core);
            }
            const int room = drain_room(st);
            if (room <= 0 || v.empty() || !policy::make_policy_set(policy_name).reconfigure) return;
            const auto& rc = st.cfg.reconfigure;
            std::vector<policy::arrival_record> arrivals;
            for (std::size_t i = 1; i + 2 < v.size(); i += 3)
              arrivals.push_back({v[i], static_cast<int>(v[i + 1]), static_cast<int>(v[i + 2])});
            const auto fc = policy::forecast_from_arrivals(arrivals, v[0], forecast_settings(st));
            if (fc.mix.empty()) return;  // nothing seen yet: no basis for a plan
            std::vector<int> devices;
            std::vector<policy::partition> current;
            layout_now(st, devices, current);
            // A forecast is evidence for as long as the history it comes from (reconfig.hpp).
            const auto rcfg = planner_settings(
                st, std::min({rc.min_dwell_ms / 1e3, rc.window_ms / 1e3, v[0] - arrivals.front().t_s}));
            const auto plan = policy::optimize_layout(devices, current, fc, *st.cost, *st.quality, rcfg);
            if (!plan.switch_layout || plan.nodes.size() != current.size()) return;
            const auto now = clock_type::now();
            std::vector<policy::drain_candidate> candidates(current.size());
            for (std::size_t i = 0; i < current.size(); ++i) {
              const auto& node = st.cfg.nodes[i].name;
              auto since = st.changed_at.find(node);
              candidates[i].changes = plan.nodes[i] != current[i];
              // Hysteresis in time: a node keeps a layout for min_dwell_ms.
              candidates[i].may_change = !st.regrouping.count(node) &&
                                         (since == st.changed_at.end() ||
                                          now - since->second >= std::chrono::milliseconds(rc.min_dwell_ms));
              auto h = held.find(node);
              candidates[i].held = h == held.end() ? 0 : static_cast<std::size_t>(std::max(0, h->second));
            }
            // Capacity drops by at most max_fraction of the nodes while they drain.
            const auto drain = policy::nodes_to_drain(candidates, room);
            if (!drain.empty()) ++st.waves;
            for (const int k : drain) {
              const auto i = static_cast<std::size_t>(k);
              const auto& node = st.cfg.nodes[i].name;
              auto reason = plan_reason(fc, plan, rcfg);
              reason["node"] = node;
              reason["from"] = current[i];
              reason["to"] = plan.nodes[i];
              reason["current_latency_s"] = plan.current_score;
              reason["wave"] = st.waves;  // decisions of one look drain together
              rt::log_line("reconfigurer", "auto: node '" + node + "' " + degrees_text(current[i]) + " -> " +
                                               degrees_text(plan.nodes[i]) + " because " + reason.dump());
              rt::regroup_spec spec{node, std::vector<int32_t>(plan.nodes[i].begin(), plan.nodes[i].end())};
              run_regroup(self, core, supervisor, spec,
                          [=](std::string text) { log_decision(self, core, reason, text); }, false);
            }
          },
          [](caf::error& e) { rt::log_line("reconfigurer", "auto: could not read the load: " + to_string(e)); });
}

// A provisioning in progress: the nodes still to regroup (each with its layout before) and the
// answer being built.
struct provision_run {
  json reason, answer;
  std::vector<std::pair<policy::partition, rt::regroup_spec>> todo;
  std::function<void(std::string)> done;
};

// Regroups the next wave of `run`'s nodes, reconfigure.max_fraction of the nodes at once as the
// automatic regroups (policy::nodes_at_once), and answers once all are done or one failed.
void provision_next(reconf_ptr self, caf::actor core, caf::actor supervisor, std::shared_ptr<provision_run> run) {
  if (run->todo.empty()) {
    self->state.provisioning = false;
    publish(self, core);
    return run->done(run->answer.dump());
  }
  const auto at_once = static_cast<std::size_t>(
      policy::nodes_at_once(self->state.cfg.reconfigure.max_fraction, self->state.cfg.nodes.size()));
  const auto n = std::min(at_once, run->todo.size());
  std::vector<std::pair<policy::partition, rt::regroup_spec>> wave(run->todo.begin(), run->todo.begin() + static_cast<std::ptrdiff_t>(n));
  run->todo.erase(run->todo.begin(), run->todo.begin() + static_cast<std::ptrdiff_t>(n));
  auto left = std::make_shared<std::size_t>(n);
  ++self->state.waves;
  for (const auto& [from, spec] : wave) {
    auto r = run->reason;
    r["node"] = spec.node;
    r["from"] = from;
    r["to"] = spec.groups;
    r["wave"] = self->state.waves;
    run_regroup(self, core, supervisor, spec, [=, node = spec.node](std::string text) {
      if (log_decision(self, core, r, text)) {
        run->answer["regrouped"].push_back(node);
      } else if (run->answer.value("ok", true)) {
        run->answer["ok"] = false;
        run->answer["error"] = "node '" + node + "' did not regroup: " + self->state.decisions.back().value("error", text);
        run->todo.clear();
      }
      if (--*left == 0) provision_next(self, core, supervisor, run);
    }, false);
  }
}

void provision_plan(reconf_ptr self, caf::actor core, caf::actor supervisor,
                    const std::vector<policy::arrival_record>& history, std::function<void(std::string)> done);

// Provisioning from history (`dilaserve provision`): the layout the optimizer plans for the
// aggregate statistics of a history of arrivals (policy::provisioning_forecast, the simulator's
// boot layout), from scratch rather than against today's layout, then each node that differs
// regrouped in turn as `reconfigure` does. `flat` holds (seconds, prompt tokens, answer tokens)
// triples.
void provision(reconf_ptr self, caf::actor core, caf::actor supervisor, const std::vector<double>& flat,
               std::function<void(std::string)> done) {
  auto& st = self->state;
  if (st.busy()) return done(fail("another reconfiguration is running"));
  if (flat.empty() || flat.size() % 3 != 0)
    return done(fail("a history is (seconds, prompt tokens, answer tokens) per arrival, at least one arrival"));
  std::vector<policy::arrival_record> history;
  history.reserve(flat.size() / 3);
  for (std::size_t i = 0; i < flat.size(); i += 3) {
    const double t = flat[i], p = flat[i + 1], g = flat[i + 2];
    // A token count beyond 2^30 is no model's; it would only overflow the planner's ints.
    constexpr double max_tokens = 1 << 30;
    if (!std::isfinite(t) || !(p >= 0 && p <= max_tokens) || !(g >= 1 && g <= max_tokens))
      return done(fail("arrival " + std::to_string(i / 3 + 1) +
                       " of the history needs a finite time, prompt tokens >= 0 and answer tokens >= 1"));
    history.push_back({t, static_cast<int>(p), static_cast<int>(g)});
  }
  std::stable_sort(history.begin(), history.end(),
                   [](const policy::arrival_record& a, const policy::arrival_record& b) { return a.t_s < b.t_s; });
  if (auto why = load_models(st); !why.empty()) return done(fail("cannot plan a layout: " + why));
  st.provisioning = true;  // no regroup starts while the supervisor answers
  // The deadlines the plan is for count the supervisor's path overhead.
  self->request(supervisor, std::chrono::seconds(10), rt::load_atom::value)
      .then(
          [=](const std::vector<double>&, const std::string&, const std::map<std::string, int32_t>&, double overhead_ms) {
            self->state.request_overhead_s = std::max(0.0, overhead_ms) / 1e3;
            provision_plan(self, core, supervisor, history, done);
          },
          [=](caf::error& e) {
            self->state.provisioning = false;
            done(fail("cannot plan a layout: the supervisor did not answer: " + to_string(e)));
          });
}

// The plan of a provisioning and its regroups, in waves.
void provision_plan(reconf_ptr self, caf::actor core, caf::actor supervisor,
                    const std::vector<policy::arrival_record>& history, std::function<void(std::string)> done) {
  auto& st = self->state;
  const auto fc = policy::provisioning_forecast(history, forecast_settings(st));
  std::vector<int> devices;
  std::vector<policy::partition> current;
  layout_now(st, devices, current);
  const auto rcfg = planner_settings(st, st.cfg.reconfigure.min_dwell_ms / 1e3);
  const auto plan = policy::optimize_layout(devices, {}, fc, *st.cost, *st.quality, rcfg);
  if (plan.nodes.size() != devices.size()) {
    st.provisioning = false;
    return done(fail("the optimizer found no layout for these devices"));
  }
  auto reason = plan_reason(fc, plan, rcfg);
  reason["provisioned_from"] = history.size();
  auto run = std::make_shared<provision_run>();
  run->reason = reason;
  run->answer = reason;
  run->answer["ok"] = true;
  run->answer["layout"] = json::object();
  run->answer["regrouped"] = json::array();
  run->done = std::move(done);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& node = st.cfg.nodes[i].name;
    run->answer["layout"][node] = plan.nodes[i];
    if (plan.nodes[i] != current[i])
      run->todo.push_back({current[i], rt::regroup_spec{node, std::vector<int32_t>(plan.nodes[i].begin(), plan.nodes[i].end())}});
  }
  rt::log_line("reconfigurer", "provision: " + run->answer.dump());
  provision_next(self, core, supervisor, run);
}

caf::behavior reconfigurer(reconf_ptr self, caf::actor core, caf::actor supervisor, rt::cluster_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  for (const auto& n : st.cfg.nodes) st.layout[n.name].assign(n.groups.begin(), n.groups.end());
  if (st.cfg.reconfigure.automatic) {
    if (auto why = load_models(st); why.empty())
      self->send(self, rt::beat_atom::value);
    else
      rt::log_line("reconfigurer", "reconfigure: auto is off: " + why);
  }
  rt::actor_info row{0, "reconfigurer", "reconfigurer", "head", static_cast<int32_t>(::getpid()), "ALIVE", 0,
                     R"({"busy":false})"};
  self->request(core, std::chrono::seconds(10), rt::register_atom::value, row).then([=](uint64_t id) {
    self->state.dir_id = id;
    publish(self, core);
  });
  return {
      [=](rt::regroup_atom, rt::regroup_spec& spec) -> caf::result<caf::message> {
        // Only the head's endpoint (which checked the admin token) asks for a regroup.
        if (!sender_is_local(self, "reconfigurer")) return caf::make_error(caf::sec::runtime_error, std::string("not local"));
        auto rp = self->make_response_promise();
        if (self->state.provisioning) {
          rp.deliver(fail("another reconfiguration is running"));
          return rp;
        }
        run_regroup(self, core, supervisor, std::move(spec), [rp](std::string text) mutable { rp.deliver(std::move(text)); });
        return rp;
      },
      [=](rt::provision_atom, std::vector<double>& history) -> caf::result<caf::message> {
        if (!sender_is_local(self, "reconfigurer")) return caf::make_error(caf::sec::runtime_error, std::string("not local"));
        auto rp = self->make_response_promise();
        provision(self, core, supervisor, history, [rp](std::string text) mutable { rp.deliver(std::move(text)); });
        return rp;
      },
      // The automatic interval: a message to itself.
      [=](rt::beat_atom) {
        if (sender_is_local(self, "reconfigurer")) auto_tick(self, core, supervisor);
      },
  };
}

}  // namespace

caf::actor spawn_reconfigurer(caf::actor_system& sys, caf::actor core, caf::actor supervisor, rt::cluster_config cfg) {
  return sys.spawn(reconfigurer, std::move(core), std::move(supervisor), std::move(cfg));
}

}  // namespace dls::actors
