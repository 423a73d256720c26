// The migration planner of a running cluster: every interval, while the active policy set
// migrates (`migration`: balance, `dilaserve`: deadline), it asks each TP group for its
// requests, builds the policy's input through the snapshot adapter (policy_view.hpp) and calls
// policy::plan_migrations, the function the simulator calls. Each move it decides goes to the
// supervisor as an order, the same path as `dilaserve migrate`; the source group carries it
// out at its next step boundary.
#include "actors/peer_roles.hpp"
#include "actors/policy_view.hpp"
#include "actors/spawn.hpp"
#include "policies/migration.hpp"
#include "policies/presets.hpp"
#include "runtime/log.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <memory>

namespace dls::actors {

namespace rt = dls::runtime;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

// A group that does not report within this is left out of that round.
constexpr auto report_timeout = std::chrono::seconds(2);

// Moves listed in the directory, the newest last.
constexpr std::size_t moves_shown = 16;

struct migrator_state {
  caf::actor core;
  caf::actor supervisor;
  std::shared_ptr<const policy_context> ctx;
  rt::migration_settings settings;  // the cluster file's `migration:` (the simulator reads it too)
  uint64_t dir_id = 0;
  std::string policy;
  bool busy = false;         // a round is collecting reports
  uint64_t rounds = 0;       // rounds that called the policy
  uint64_t planned = 0;      // moves it decided
  uint64_t ordered = 0;      // moves a group accepted
  double policy_s = 0;       // wall time of adapter + plan_migrations
  double policy_cpu_s = 0;   // the same on this thread's CPU clock
  json recent = json::array();
  std::string off_reason;
  static inline const char* name = "dls.migrator";
};

using mig_ptr = caf::stateful_actor<migrator_state>*;

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void publish(mig_ptr self) {
  auto& st = self->state;
  if (!st.dir_id) return;
  json d{{"policy", st.policy}, {"rounds", st.rounds}, {"planned", st.planned}, {"ordered", st.ordered},
         {"policy_s", st.policy_s}, {"policy_cpu_s", st.policy_cpu_s}, {"recent", st.recent},
         {"interval_ms", st.settings.interval_ms}};
  if (!st.off_reason.empty()) d["off"] = st.off_reason;
  self->send(st.core, rt::detail_atom::value, st.dir_id, std::string{}, d.dump());
}

void plan(mig_ptr self, const std::vector<rt::group_report>& reports, policy::migration_mode mode) {
  auto& st = self->state;
  const auto& ctx = *st.ctx;
  const auto t0 = clock_type::now();
  const double cpu0 = thread_cpu_s();
  auto in = migration_input_of(reports, ctx.quality);
  policy::migration_config cfg;
  cfg.mode = mode;
  cfg.token_budget = ctx.knobs.token_budget;
  cfg.max_active = ctx.knobs.max_active;
  cfg.max_moves = st.settings.max_moves;
  cfg.imbalance = st.settings.imbalance;
  policy::link_params link;
  if (ctx.cost->memory.kv_bytes_per_token > 0) link.kv_bytes_per_token = ctx.cost->memory.kv_bytes_per_token;
  auto moves = policy::plan_migrations(in.groups, in.request_lists(), 0.0, *ctx.cost, ctx.quality, cfg, link);
  st.policy_s += std::chrono::duration<double>(clock_type::now() - t0).count();
  st.policy_cpu_s += thread_cpu_s() - cpu0;
  st.rounds += 1;
  st.planned += moves.size();
  for (const auto& m : moves) {
    const auto& from = in.names[static_cast<std::size_t>(m.from)];
    const auto& to = in.names[static_cast<std::size_t>(m.to)];
    const auto id = m.request;
    self->request(st.supervisor, std::chrono::seconds(10), rt::migrate_atom::value, id, to, std::string("any"),
                  st.policy)
        .then(
            [=](const std::string& answer) {
              auto& st = self->state;
              auto j = json::parse(answer, nullptr, false);
              if (!j.is_object() || !j.value("ok", false)) return;  // it finished or moved meanwhile
              st.ordered += 1;
              st.recent.push_back({{"request", id}, {"from", from}, {"to", to}});
              if (st.recent.size() > moves_shown) st.recent.erase(st.recent.begin());
              publish(self);
            },
            [](caf::error&) {});
  }
  if (!moves.empty()) publish(self);
}

void tick(mig_ptr self) {
  auto& st = self->state;
  self->delayed_send(self, std::chrono::milliseconds(st.settings.interval_ms), rt::beat_atom::value);
  if (st.busy) return;
  st.busy = true;
  self->request(st.supervisor, std::chrono::seconds(10), rt::groups_atom::value)
      .then(
          [=](std::vector<rt::group_info>& groups, std::string& policy) {
            auto& st = self->state;
            if (policy != st.policy) {
              st.policy = policy;
              publish(self);
            }
            policy::migration_mode mode = policy::migration_mode::none;
            try {
              mode = policy::make_policy_set(policy).migration;
            } catch (const std::invalid_argument&) {
            }
            if (mode == policy::migration_mode::none || groups.size() < 2 || !st.ctx->cost) {
              st.busy = false;
              return;
            }
            auto reports = std::make_shared<std::vector<rt::group_report>>();
            auto left = std::make_shared<std::size_t>(groups.size());
            auto done = [=] {
              if (--*left > 0) return;
              self->state.busy = false;
              plan(self, *reports, mode);
            };
            for (auto& g : groups)
              self->request(g.handle, report_timeout, rt::view_atom::value)
                  .then(
                      [=](rt::group_report& r) {
                        reports->push_back(std::move(r));
                        done();
                      },
                      [=](caf::error&) { done(); });
          },
          [=](caf::error&) { self->state.busy = false; });
}

caf::behavior migrator(mig_ptr self, caf::actor core, caf::actor supervisor, rt::cluster_config cfg) {
  auto& st = self->state;
  st.core = std::move(core);
  st.supervisor = std::move(supervisor);
  st.policy = cfg.scheduler.policy;
  st.settings = cfg.migration;
  try {
    st.ctx = make_policy_context(cfg.scheduler, cfg.engine);
  } catch (const std::exception& e) {
    st.off_reason = e.what();
  }
  if (!st.ctx) st.ctx = std::make_shared<policy_context>();
  if (!st.ctx->cost && st.off_reason.empty())
    st.off_reason = "no step-cost profile: the migration policy needs step costs";
  if (!st.off_reason.empty()) rt::log_line("migrator", "live migration is off: " + st.off_reason);
  rt::actor_info row{0, "migrator", "migrator", "head", static_cast<int32_t>(::getpid()), "ALIVE", 0, "{}"};
  self->request(st.core, std::chrono::seconds(10), rt::register_atom::value, row).then([=](uint64_t id) {
    self->state.dir_id = id;
    publish(self);
  });
  if (st.off_reason.empty()) self->send(self, rt::beat_atom::value);
  return {
      [=](rt::beat_atom) {
        if (sender_is_local(self, "migrator")) tick(self);
      },
  };
}

}  // namespace

caf::actor spawn_migrator(caf::actor_system& sys, caf::actor core, caf::actor supervisor, rt::cluster_config cfg) {
  return sys.spawn(migrator, std::move(core), std::move(supervisor), std::move(cfg));
}

}  // namespace dls::actors
