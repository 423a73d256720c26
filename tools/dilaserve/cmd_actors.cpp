// `dilaserve actors`: the actor directory, like `ray list actors`.
#include "dilaserve/cluster_flags.hpp"
#include "dilaserve/command_registry.hpp"
#include "runtime/client.hpp"

#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

namespace rt = dls::runtime;
using json = nlohmann::json;

namespace {

struct actors_options {
  dls::cli::cluster_flags cluster;
  std::string kind, node, state;
  bool json_out = false;
};

// The per-kind details in one short column.
std::string summary(const rt::actor_info& a) {
  auto d = json::parse(a.details, nullptr, false);
  if (!d.is_object()) return "";
  if (a.kind == "request")
    return d.value("status", "") + " tau=" + std::to_string(d.value("tau", 0.0)).substr(0, 4) + " " +
           std::to_string(d.value("tokens", 0)) + "/" + std::to_string(d.value("gen_length", 0)) + " on " +
           d.value("group", std::string("-"));
  if (a.kind == "tp_group") {
    std::string devs;
    for (auto& x : d.value("devices", json::array())) devs += (devs.empty() ? "" : ",") + std::to_string(x.get<int>());
    return "degree=" + std::to_string(d.value("degree", 0)) + " devices=" + devs +
           " queue=" + std::to_string(d.value("queue", 0));
  }
  if (a.kind == "worker") return d.value("device", "");
  if (a.kind == "node") return d.value("kind", "") + " x" + std::to_string(d.value("devices", 0));
  return "";
}

int run_actors(const actors_options& o) {
  rt::cluster_session session(o.cluster.find());
  caf::scoped_actor self{session.system()};
  std::vector<rt::actor_info> rows;
  std::string failure;
  self->request(session.head(), std::chrono::seconds(10), rt::actors_atom::value)
      .receive([&](std::vector<rt::actor_info>& r) { rows = std::move(r); },
               [&](const caf::error& e) { failure = session.system().render(e); });
  if (!failure.empty()) throw std::runtime_error("actors failed: " + failure);
  std::vector<rt::actor_info> shown;
  for (auto& r : rows)
    if ((o.kind.empty() || r.kind == o.kind) && (o.node.empty() || r.node == o.node) &&
        (o.state.empty() || r.state == o.state))
      shown.push_back(r);
  if (o.json_out) {
    auto out = json::array();
    for (auto& r : shown)
      out.push_back({{"id", r.id}, {"kind", r.kind}, {"name", r.name}, {"node", r.node}, {"pid", r.pid},
                     {"state", r.state}, {"restarts", r.restarts},
                     {"details", json::parse(r.details, nullptr, false)}});
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::printf("%-5s %-13s %-16s %-10s %-8s %-6s %-3s %s\n", "ID", "KIND", "NAME", "NODE", "PID", "STATE", "RST",
              "DETAILS");
  for (auto& r : shown)
    std::printf("%-5llu %-13s %-16s %-10s %-8d %-6s %-3u %s\n", static_cast<unsigned long long>(r.id), r.kind.c_str(),
                r.name.c_str(), r.node.c_str(), r.pid, r.state.c_str(), r.restarts, summary(r).c_str());
  std::cout << shown.size() << " actor(s)\n";
  return 0;
}

dls::cli::register_command reg{"actors", [](CLI::App& app) {
  auto* sub = app.add_subcommand("actors", "List the actors of the cluster (like `ray list actors`)");
  auto o = std::make_shared<actors_options>();
  sub->add_option("--kind", o->kind, "Only this kind: request, worker, tp_group, supervisor, reconfigurer, node")
      ->check(CLI::IsMember({"request", "worker", "tp_group", "supervisor", "reconfigurer", "node"}));
  sub->add_option("--node", o->node, "Only actors on this node ('head' for head actors)");
  sub->add_option("--state", o->state, "Only this state: ALIVE, DEAD, RESTARTING")
      ->check(CLI::IsMember({"ALIVE", "DEAD", "RESTARTING"}));
  o->cluster.add_to(sub);
  sub->add_flag("--json", o->json_out, "Print a JSON list of objects");
  return std::function<int()>([o] { return run_actors(*o); });
}};

}  // namespace
