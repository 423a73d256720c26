// `dilaserve migrate REQUEST --to GROUP [--at any|boundary|mid-block]`: move one running
// request to another TP group by hand (admin token). The group it runs on lets it go at its
// next step boundary of that kind; `actors --kind request` then lists the move.
#include "dilaserve/cluster_flags.hpp"
#include "dilaserve/command_registry.hpp"
#include "runtime/client.hpp"

#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

namespace rt = dls::runtime;
using json = nlohmann::json;

namespace {

struct migrate_options {
  dls::cli::cluster_flags cluster;
  uint64_t request = 0;
  std::string to;
  std::string at = "any";
  bool json_out = false;
};

int run_migrate(const migrate_options& o) {
  rt::cluster_session session(o.cluster.find());
  caf::scoped_actor self{session.system()};
  std::string text, failure;
  self->request(session.head(), std::chrono::seconds(30), rt::migrate_atom::value, o.request, o.to, o.at,
                session.credential())
      .receive([&](std::string& s) { text = std::move(s); },
               [&](const caf::error& e) { failure = session.system().render(e); });
  if (!failure.empty()) throw std::runtime_error("migrate failed: " + failure);
  auto j = json::parse(text);
  if (o.json_out) std::cout << text << "\n";
  if (!j.value("ok", false)) {
    if (!o.json_out) std::cerr << "dilaserve: error: migrate refused: " << j.value("error", "") << "\n";
    return 1;
  }
  if (!o.json_out)
    std::cout << "request " << o.request << " moves " << j.value("from", "") << " -> " << j.value("to", "")
              << " at its next " << (o.at == "any" ? std::string("step") : o.at) << " boundary\n";
  return 0;
}

dls::cli::register_command reg{"migrate", [](CLI::App& app) {
  auto* sub = app.add_subcommand("migrate", "Move a running request to another TP group");
  auto o = std::make_shared<migrate_options>();
  sub->add_option("request", o->request, "Request id (actors --kind request)")->required();
  sub->add_option("--to", o->to, "Destination TP group, e.g. node1/g0")->required();
  sub->add_option("--at", o->at, "Which step boundary: any (the next), boundary (before a refresh: only the "
                                 "canvas moves) or mid-block (before a reuse step: the KV cache moves or is rebuilt)")
      ->check(CLI::IsMember({"any", "boundary", "mid-block"}));
  o->cluster.add_to(sub);
  sub->add_flag("--json", o->json_out, "Print JSON");
  return std::function<int()>([o] { return run_migrate(*o); });
}};

}  // namespace
