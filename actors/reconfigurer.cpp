// The reconfigurer executes a split or merge of one node's devices on command:
// the supervisor stops placing there, the node pauses its groups' requests at refresh
// boundaries, regroups its workers and resumes every request from its canvas.
// Automatic decisions belong to the policy layer (issue 4).
#include "actors/peer_roles.hpp"
#include "actors/spawn.hpp"
#include "runtime/log.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>

namespace dls::actors {

namespace rt = dls::runtime;
using json = nlohmann::json;

namespace {

struct reconfigurer_state {
  bool busy = false;
  uint64_t dir_id = 0;
  static inline const char* name = "dls.reconfigurer";
};

std::string fail(const std::string& why) { return json{{"ok", false}, {"error", why}}.dump(); }

using reconf_ptr = caf::stateful_actor<reconfigurer_state>*;

// Shows a regroup in progress in the directory (`actors --kind reconfigurer`).
void publish(reconf_ptr self, const caf::actor& core, json details) {
  if (self->state.dir_id) self->send(core, rt::detail_atom::value, self->state.dir_id, std::string{}, details.dump());
}

caf::behavior reconfigurer(reconf_ptr self, caf::actor core, caf::actor supervisor) {
  rt::actor_info row{0, "reconfigurer", "reconfigurer", "head", static_cast<int32_t>(::getpid()), "ALIVE", 0,
                     R"({"busy":false})"};
  self->request(core, std::chrono::seconds(10), rt::register_atom::value, row).then([=](uint64_t id) {
    self->state.dir_id = id;
  });
  return {
      [=](rt::regroup_atom, rt::regroup_spec& spec) -> caf::result<caf::message> {
        // Only the head's endpoint (which checked the admin token) asks for a regroup.
        if (!sender_is_local(self)) return caf::make_error(caf::sec::runtime_error, std::string("not local"));
        auto rp = self->make_response_promise();
        if (self->state.busy) {
          rp.deliver(fail("another reconfiguration is running"));
          return rp;
        }
        self->state.busy = true;
        auto start = std::chrono::steady_clock::now();
        auto done = [=](std::string text) mutable {
          self->state.busy = false;
          publish(self, core, {{"busy", false}, {"last", json::parse(text, nullptr, false)}});
          rp.deliver(std::move(text));
        };
        auto on_error = [=](caf::error& e) mutable {
          // Whatever state the node is in, let the supervisor use its groups again.
          caf::anon_send(supervisor, rt::drain_atom::value, spec.node, false);
          done(fail(to_string(e)));
        };
        self->request(core, std::chrono::seconds(10), rt::check_atom::value, spec)
            .then(
                [=](const std::string& why, caf::actor agent) mutable {
                  if (!why.empty() || !agent) {
                    done(fail(why.empty() ? "node has no agent" : why));
                    return;
                  }
                  self->request(supervisor, std::chrono::seconds(10), rt::drain_atom::value, spec.node)
                      .then(
                          [=](bool) mutable {
                            publish(self, core, {{"busy", true}, {"node", spec.node}, {"groups", spec.groups}});
                            self->request(agent, std::chrono::minutes(5), rt::regroup_atom::value, spec)
                                .then(
                                    [=](std::vector<rt::group_info>& groups, const std::string& stats) mutable {
                                      self->request(core, std::chrono::seconds(10), rt::groups_atom::value, spec.node,
                                                    groups, std::vector<rt::actor_info>{})
                                          .then(
                                              [=](std::vector<rt::group_info>& registered) mutable {
                                                auto total = std::chrono::duration<double, std::milli>(
                                                                 std::chrono::steady_clock::now() - start)
                                                                 .count();
                                                json j{{"ok", true}, {"node", spec.node}, {"total_ms", total}};
                                                j["node_stats"] = json::parse(stats, nullptr, false);
                                                j["groups"] = json::array();
                                                for (auto& g : registered)
                                                  j["groups"].push_back(
                                                      {{"id", g.id}, {"name", g.name}, {"degree", g.degree},
                                                       {"devices", g.devices}});
                                                rt::log_line("reconfigurer", "regrouped node '" + spec.node +
                                                                                 "': " + j.dump());
                                                done(j.dump());
                                              },
                                              on_error);
                                    },
                                    on_error);
                          },
                          on_error);
                },
                on_error);
        return rp;
      },
  };
}

}  // namespace

caf::actor spawn_reconfigurer(caf::actor_system& sys, caf::actor core, caf::actor supervisor) {
  return sys.spawn(reconfigurer, std::move(core), std::move(supervisor));
}

}  // namespace dls::actors
