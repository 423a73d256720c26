// `dilaserve status`: nodes, devices, TP groups with degree and queue, requests.
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

struct status_options {
  dls::cli::cluster_flags cluster;
  bool json_out = false;
};

int run_status(const status_options& o) {
  rt::cluster_session session(o.cluster.find());
  caf::scoped_actor self{session.system()};
  std::string text, failure;
  self->request(session.head(), std::chrono::seconds(10), rt::status_atom::value)
      .receive([&](std::string& s) { text = std::move(s); },
               [&](const caf::error& e) { failure = session.system().render(e); });
  if (!failure.empty()) throw std::runtime_error("status failed: " + failure);
  if (o.json_out) {
    std::cout << text << "\n";
    return 0;
  }
  auto j = json::parse(text);
  std::cout << "cluster " << j["cluster"].get<std::string>() << " (head " << session.address().host << ":"
            << session.address().port << "), policy " << j.value("policy", "?") << "\n\nNODES\n";
  std::printf("  %-12s %-8s %-8s %-10s %s\n", "NAME", "STATE", "PID", "DEVICES", "HEARTBEAT");
  for (auto& n : j["nodes"]) {
    auto devices = n["devices"]["kind"].get<std::string>() + " x" + std::to_string(n["devices"]["slots"].get<int>());
    std::string beat = n.contains("heartbeat_age_ms") ? std::to_string(n["heartbeat_age_ms"].get<long>()) + " ms ago"
                                                      : n.value("reason", "-");
    std::printf("  %-12s %-8s %-8d %-10s %s\n", n["name"].get<std::string>().c_str(),
                n["state"].get<std::string>().c_str(), n["pid"].get<int>(), devices.c_str(), beat.c_str());
  }
  std::cout << "\nTP GROUPS\n";
  std::printf("  %-14s %-10s %-7s %-10s %-6s %s\n", "NAME", "NODE", "DEGREE", "DEVICES", "QUEUE", "STEPS");
  for (auto& g : j["groups"]) {
    std::string devs;
    for (auto& d : g.value("devices", json::array())) devs += (devs.empty() ? "" : ",") + std::to_string(d.get<int>());
    std::printf("  %-14s %-10s %-7d %-10s %-6d %d\n", g["name"].get<std::string>().c_str(),
                g["node"].get<std::string>().c_str(), g.value("degree", 0), devs.c_str(), g.value("queue", 0),
                g.value("steps", 0));
  }
  if (j.contains("reconfigurer")) {
    const auto& rc = j["reconfigurer"];
    std::cout << "\nRECONFIGURATION (" << rc.value("mode", "manual") << ")\n";
    for (const auto& d : rc.value("decisions", json::array())) {
      std::string from, to;
      for (auto& x : d["from"]) from += (from.empty() ? "" : ",") + std::to_string(x.get<int>());
      for (auto& x : d["to"]) to += (to.empty() ? "" : ",") + std::to_string(x.get<int>());
      std::printf("  %-10s {%s} -> {%s}  forecast %.1f req/s, capacity %.1f req/s%s\n",
                  d.value("node", "").c_str(), from.c_str(), to.c_str(), d.value("forecast_rps", 0.0),
                  d.value("capacity_rps", 0.0), d.value("ok", false) ? "" : " (failed)");
    }
  }
  auto& r = j["requests"];
  std::cout << "\nREQUESTS\n  in flight " << r["in_flight"] << ", finished " << r["finished"] << ", failed "
            << r["failed"] << "\n";
  // Each request in flight with its policy state (all of them in --json).
  constexpr std::size_t shown = 20;
  const auto& live = r.contains("live") ? r["live"] : json::array();
  if (!live.empty()) {
    std::printf("  %-14s %-10s %-14s %-6s %-12s %-12s %s\n", "NAME", "STATUS", "GROUP", "TAU", "DEADLINE_MS",
                "SLACK_MS", "NEXT");
    for (std::size_t i = 0; i < live.size() && i < shown; ++i) {
      const auto& q = live[i];
      std::printf("  %-14s %-10s %-14s %-6.2f %-12.1f %-12.1f %s\n", q.value("name", "").c_str(),
                  q.value("status", "").c_str(), q.value("group", "").c_str(), q.value("tau", 0.0),
                  q.value("deadline_ms", 0.0), q.value("slack_ms", 0.0), q.value("next_step", "-").c_str());
    }
    if (live.size() > shown) std::cout << "  ... and " << live.size() - shown << " more (status --json)\n";
  }
  return 0;
}

dls::cli::register_command reg{"status", [](CLI::App& app) {
  auto* sub = app.add_subcommand("status", "Show nodes, devices, TP groups and request counts");
  auto o = std::make_shared<status_options>();
  o->cluster.add_to(sub);
  sub->add_flag("--json", o->json_out, "Print JSON");
  return std::function<int()>([o] { return run_status(*o); });
}};

}  // namespace
