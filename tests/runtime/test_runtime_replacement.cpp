// The supervisor and a request actor in one process, with stand-in TP groups, for the
// orderings of a node's death that a multi-process test only hits by chance: no accepted
// request may be lost, whichever of the group's down message, the supervisor's node_dead
// and the failed admission arrives first.
#define BOOST_TEST_MODULE test_runtime_replacement
#include <boost/test/unit_test.hpp>

#include "actors/head_messages.hpp"
#include "actors/spawn.hpp"
#include "runtime/caf_setup.hpp"
#include "runtime/group_load.hpp"
#include "runtime/messages.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace rt = dls::runtime;

namespace {

// The head core's directory, as far as requests and the supervisor use it.
caf::behavior core_stub(caf::event_based_actor*) {
  return {
      [=](dls::actors::request_row_atom, uint64_t, const std::string&, const dls::actors::request_details&, bool) {},
      [=](rt::detail_atom, uint64_t, const std::string&, const std::string&) {},
      [=](dls::actors::group_row_atom, uint64_t, const dls::actors::group_details&) {},
  };
}

// A group that admits the request, tells it where it runs, and then dies as its node does
// (a crash reason, not the user_shutdown of a regroup).
caf::behavior dying_group(caf::event_based_actor* self, std::string node, std::string name) {
  return {
      [=](rt::enqueue_atom, rt::work_item& w) {
        self->send(w.request, rt::placed_atom::value, w.epoch, node, name);
        self->send_exit(self, caf::exit_reason::remote_link_unreachable);
      },
  };
}

// The same, but the supervisor hears of the node's death right away too, so both the
// group's down message and the supervisor's re-placement reach the request.
caf::behavior dying_group_reported(caf::event_based_actor* self, caf::actor supervisor, std::string node,
                                   std::string name) {
  return {
      [=](rt::enqueue_atom, rt::work_item& w) {
        self->send(w.request, rt::placed_atom::value, w.epoch, node, name);
        self->send(supervisor, rt::node_dead_atom::value, node);
        self->send_exit(self, caf::exit_reason::remote_link_unreachable);
      },
  };
}

// A group on the same dying node that receives the re-placement: before it can fail the
// admission, the supervisor learns that the node is dead.
caf::behavior late_group(caf::event_based_actor* self, caf::actor supervisor, std::string node) {
  return {
      [=](rt::enqueue_atom, rt::work_item&) {
        self->send(supervisor, rt::node_dead_atom::value, node);
        self->quit(caf::exit_reason::remote_link_unreachable);  // the admission fails
      },
  };
}

// A group on the dying node that takes the re-placement and dies before admitting it,
// without the node's death being reported (a group that crashed, or whose node's death the
// head hears of only later): its down message alone must re-place the request, which is
// still waiting for that placement.
caf::behavior silently_dying_group(caf::event_based_actor* self) {
  return {
      [=](rt::enqueue_atom, rt::work_item&) { self->quit(caf::exit_reason::remote_link_unreachable); },
  };
}

// A group that admits the request and lets it go at once to n0/z, as a migration does, after
// committing tokens at tau 0.7.
caf::behavior migrating_group(caf::event_based_actor* self, std::string node, std::string name) {
  return {
      [=](rt::enqueue_atom, rt::work_item& w) {
        self->send(w.request, rt::placed_atom::value, w.epoch, node, name);
        rt::migration_handoff h;
        h.from = name;
        h.to = "n0/z";
        h.how = "canvas";
        h.reason = "test";
        h.step = 2;
        h.tau_low = 0.7;
        self->send(w.request, rt::migrate_atom::value, w.epoch, h);
      },
  };
}

// A group on a surviving node that finishes every request it admits.
caf::behavior good_group(caf::event_based_actor* self, std::string node, std::string name,
                         std::shared_ptr<std::atomic<int>> admitted,
                         std::shared_ptr<std::atomic<double>> tau_low) {
  return {
      [=](rt::enqueue_atom, rt::work_item& w) {
        *tau_low = w.tau_low;
        ++*admitted;
        self->send(w.request, rt::placed_atom::value, w.epoch, node, name);
        rt::run_result r;
        r.text = "answer";
        r.steps = 3;
        r.tokens = 3;
        r.node = node;
        r.group = name;
        self->send(w.request, rt::finished_atom::value, w.epoch, r);
      },
  };
}

rt::group_info info(uint64_t id, std::string name, std::string node, caf::actor handle) {
  rt::group_info g;
  g.id = id;
  g.name = std::move(name);
  g.node = std::move(node);
  g.degree = 1;
  g.devices = {0};
  g.handle = std::move(handle);
  return g;
}

struct outcome {
  rt::answer got;
  std::string failure;  // empty when the request was answered
  int admitted = 0;     // admissions by the surviving group
  double tau_low = -1;  // the work item's, as the surviving group got it
};

// One request through a supervisor that knows the dying node n1's groups, made by
// `n1_groups` (given the system and the supervisor), and a surviving group n0/z. n0/z
// carries queued work, so the supervisor's ties go to n1 while n1 is listed.
outcome submit_one(const std::function<std::vector<rt::group_info>(caf::actor_system&, caf::actor)>& n1_groups) {
  caf::actor_system_config cfg;
  rt::configure_caf(cfg, {});
  caf::actor_system sys{cfg};
  outcome out;
  {
    caf::scoped_actor self{sys};
    auto core = sys.spawn(core_stub);
    rt::engine_defaults defaults;
    defaults.decode.threshold = 0.9;
    defaults.decode.gen_length = 16;
    auto sup = dls::actors::spawn_supervisor(sys, core, defaults);
    auto admitted = std::make_shared<std::atomic<int>>(0);
    auto tau_low = std::make_shared<std::atomic<double>>(-1.0);
    auto z = sys.spawn(good_group, std::string("n0"), std::string("n0/z"), admitted, tau_low);
    self->send(sup, rt::groups_atom::value, std::string("n1"), n1_groups(sys, sup));
    self->send(sup, rt::groups_atom::value, std::string("n0"), std::vector<rt::group_info>{info(3, "n0/z", "n0", z)});
    rt::group_load busy;
    busy.work = 1000.0;
    busy.queued = 8;
    self->send(sup, rt::load_atom::value, std::string("n0/z"), busy);
    rt::submit_spec spec;
    spec.prompt = "p";
    self->request(sup, std::chrono::seconds(20), rt::submit_atom::value, spec)
        .receive([&](rt::answer& ans) { out.got = ans; }, [&](caf::error& e) { out.failure = sys.render(e); });
    // Down before checking: the supervisor takes any request actor still waiting with it, so a
    // failed check cannot leave the actor system waiting for it.
    for (const auto& x : {sup, core, z}) self->send_exit(x, caf::exit_reason::user_shutdown);
    out.admitted = *admitted;
    out.tau_low = *tau_low;
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_replacement_that_races_the_node_death_is_placed_again) {
  // Group names order the supervisor's ties: the first placement goes to n1/a (dies with
  // its node), the re-placement to n1/b (the least loaded one still listed), and only then
  // is n0/z the one left.
  auto out = submit_one([](caf::actor_system& sys, caf::actor sup) {
    auto a = sys.spawn(dying_group, std::string("n1"), std::string("n1/a"));
    auto b = sys.spawn(late_group, sup, std::string("n1"));
    return std::vector<rt::group_info>{info(1, "n1/a", "n1", a), info(2, "n1/b", "n1", b)};
  });
  BOOST_REQUIRE_MESSAGE(out.failure.empty(), "the request was lost: no answer (" << out.failure << ")");
  BOOST_TEST(out.got.ok);
  BOOST_TEST(out.got.text == "answer");
  BOOST_TEST(out.got.node == "n0");
  BOOST_TEST(out.admitted == 1);
  BOOST_TEST(out.got.moves >= 1);
}

BOOST_AUTO_TEST_CASE(a_request_is_placed_once_when_both_the_group_and_the_supervisor_report_the_death) {
  auto out = submit_one([](caf::actor_system& sys, caf::actor sup) {
    auto a = sys.spawn(dying_group_reported, sup, std::string("n1"), std::string("n1/a"));
    return std::vector<rt::group_info>{info(1, "n1/a", "n1", a)};
  });
  BOOST_REQUIRE_MESSAGE(out.failure.empty(), "no answer: " << out.failure);
  BOOST_TEST(out.got.ok);
  BOOST_TEST(out.got.node == "n0");
  // A request placed twice answers from its latest placement, which z admits after the
  // earlier one: by the answer, z has counted every admission.
  BOOST_TEST(out.admitted == 1);
}

BOOST_AUTO_TEST_CASE(a_replacement_whose_group_dies_before_admitting_it_is_placed_again) {
  auto out = submit_one([](caf::actor_system& sys, caf::actor) {
    auto a = sys.spawn(dying_group, std::string("n1"), std::string("n1/a"));
    auto b = sys.spawn(silently_dying_group);
    return std::vector<rt::group_info>{info(1, "n1/a", "n1", a), info(2, "n1/b", "n1", b)};
  });
  BOOST_REQUIRE_MESSAGE(out.failure.empty(), "the request was lost: no answer (" << out.failure << ")");
  BOOST_TEST(out.got.ok);
  BOOST_TEST(out.got.node == "n0");
  BOOST_TEST(out.admitted == 1);
  BOOST_TEST(out.got.moves >= 2);
}

// The accuracy budget charged the request at the lowest tau it committed at; the group it
// moves to must know that charge, or it charges the request again and may raise it.
BOOST_AUTO_TEST_CASE(a_migrated_request_brings_the_lowest_tau_it_committed_at) {
  auto out = submit_one([](caf::actor_system& sys, caf::actor) {
    auto a = sys.spawn(migrating_group, std::string("n1"), std::string("n1/a"));
    return std::vector<rt::group_info>{info(1, "n1/a", "n1", a)};
  });
  BOOST_REQUIRE_MESSAGE(out.failure.empty(), "no answer: " << out.failure);
  BOOST_TEST(out.got.ok);
  BOOST_TEST(out.got.node == "n0");
  BOOST_TEST(out.admitted == 1);
  BOOST_TEST(out.tau_low == 0.7);
}

// A fresh request has committed nothing: nothing is charged yet.
BOOST_AUTO_TEST_CASE(a_fresh_request_arrives_with_nothing_charged) {
  auto out = submit_one([](caf::actor_system&, caf::actor) { return std::vector<rt::group_info>{}; });
  BOOST_REQUIRE_MESSAGE(out.failure.empty(), "no answer: " << out.failure);
  BOOST_TEST(out.tau_low == 1.0);
}
