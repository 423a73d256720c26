// `dilaserve provision --history FILE`: plan every node's layout from a history of arrivals
// (the cluster's own past traffic, in the Azure trace's columns) and regroup the nodes whose
// layout differs, as a deployment sizes its first layout from history.
#include "dilaserve/cluster_flags.hpp"
#include "dilaserve/command_registry.hpp"
#include "runtime/client.hpp"
#include "sim/trace.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

namespace rt = dls::runtime;
using json = nlohmann::json;

namespace {

// Arrivals sent to the head at most: 24 bytes each on the wire (24 MB); a longer history says
// nothing more about rates and lengths than its latest million arrivals.
constexpr std::size_t max_history_arrivals = 1'000'000;

struct provision_options {
  dls::cli::cluster_flags cluster;
  std::string history;
  double duration_s = 0;
  bool json_out = false;
};

int run_provision(const provision_options& o) {
  auto rows = dls::sim::load_azure_csv(o.history);
  if (o.duration_s > 0) {
    const double t0 = rows.empty() ? 0.0 : rows.front().t;
    rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const auto& r) { return r.t - t0 >= o.duration_s; }),
               rows.end());
  }
  if (rows.empty()) throw std::runtime_error("--history " + o.history + " holds no arrival" +
                                             (o.duration_s > 0 ? " in its first --duration seconds" : ""));
  if (rows.size() > max_history_arrivals)
    rows.erase(rows.begin(), rows.end() - static_cast<std::ptrdiff_t>(max_history_arrivals));
  std::vector<double> flat;
  flat.reserve(rows.size() * 3);
  for (const auto& r : rows) {
    flat.push_back(r.t);
    flat.push_back(r.context_tokens);
    flat.push_back(std::max(1, r.generated_tokens));
  }
  rt::cluster_session session(o.cluster.find());
  const auto text =
      session.ask_text("provision", std::chrono::minutes(10), rt::provision_atom::value, flat, session.credential());
  auto j = json::parse(text, nullptr, false);
  if (!j.is_object()) throw std::runtime_error("provision: the head answered something that is not JSON");
  if (o.json_out) std::cout << text << "\n";
  if (!j.value("ok", false)) {
    if (!o.json_out) std::cerr << "dilaserve: error: provision refused: " << j.value("error", "") << "\n";
    return 1;
  }
  if (!o.json_out) {
    std::printf("planned from %zu arrivals: %.1f req/s in bursts (%.1f mean), capacity %.1f req/s, tau %.2f%s\n",
                rows.size(), j.value("forecast_rps", 0.0), j.value("mean_rps", 0.0), j.value("capacity_rps", 0.0),
                j.value("tau", 0.0), j.value("feasible", true) ? "" : " (no layout keeps up)");
    for (auto& [node, degrees] : j["layout"].items()) {
      bool moved = false;
      for (auto& n : j["regrouped"]) moved |= n.get<std::string>() == node;
      std::printf("  %-12s groups %s%s\n", node.c_str(), degrees.dump().c_str(), moved ? "  (regrouped)" : "");
    }
  }
  return 0;
}

dls::cli::register_command reg{"provision", [](CLI::App& app) {
  auto* sub = app.add_subcommand(
      "provision", "Plan every node's TP groups from a history of arrivals and regroup the nodes that differ");
  auto o = std::make_shared<provision_options>();
  sub->add_option("--history", o->history, "arrivals CSV: TIMESTAMP,ContextTokens,GeneratedTokens (the Azure trace's columns)")
      ->required();
  sub->add_option("--duration", o->duration_s, "use only the first S seconds of the history")
      ->check(CLI::PositiveNumber);
  o->cluster.add_to(sub);
  sub->add_flag("--json", o->json_out, "Print JSON");
  return std::function<int()>([o] { return run_provision(*o); });
}};

}  // namespace
