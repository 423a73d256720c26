// `dilaserve policy set NAME`: switch the policy set every TP group decides with, on a
// running cluster; `dilaserve policy list`: the names (policies/presets.hpp).
#include "dilaserve/cluster_flags.hpp"
#include "dilaserve/command_registry.hpp"
#include "policies/presets.hpp"
#include "runtime/client.hpp"

#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

namespace rt = dls::runtime;
using json = nlohmann::json;

namespace {

struct policy_options {
  dls::cli::cluster_flags cluster;
  std::string name;
  bool json_out = false;
};

int run_set(const policy_options& o) {
  rt::cluster_session session(o.cluster.find());
  caf::scoped_actor self{session.system()};
  std::string text, failure;
  self->request(session.head(), std::chrono::seconds(10), rt::policy_atom::value, o.name, session.credential())
      .receive([&](std::string& s) { text = std::move(s); },
               [&](const caf::error& e) { failure = session.system().render(e); });
  if (!failure.empty()) throw std::runtime_error("policy set failed: " + failure);
  auto j = json::parse(text);
  if (o.json_out) std::cout << text << "\n";
  if (!j.value("ok", false)) {
    if (!o.json_out) std::cerr << "dilaserve: error: " << j.value("error", "") << "\n";
    return 1;
  }
  if (!o.json_out)
    std::cout << "policy " << j["previous"].get<std::string>() << " -> " << j["policy"].get<std::string>() << " on "
              << j["groups"] << " TP groups\n";
  return 0;
}

dls::cli::register_command reg{"policy", [](CLI::App& app) {
  auto* sub = app.add_subcommand("policy", "Show or switch the scheduling policy of a running cluster");
  sub->require_subcommand(1);
  auto o = std::make_shared<policy_options>();
  auto* set = sub->add_subcommand("set", "Switch every TP group to the policy set NAME");
  set->add_option("name", o->name, "static | deadline | migration | dilaserve, or an ablation (policy list)")
      ->required();
  o->cluster.add_to(set);
  set->add_flag("--json", o->json_out, "Print JSON");
  auto* list = sub->add_subcommand("list", "Print the policy set names");
  return std::function<int()>([o, list] {
    if (list->parsed()) {
      for (const auto& n : dls::policy::policy_set_names()) std::cout << n << "\n";
      return 0;
    }
    return run_set(*o);
  });
}};

}  // namespace
