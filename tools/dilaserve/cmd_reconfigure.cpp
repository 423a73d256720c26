// `dilaserve reconfigure --node N --groups 2|1,1`: regroup a node's devices by hand.
#include "dilaserve/cluster_flags.hpp"
#include "dilaserve/command_registry.hpp"
#include "runtime/client.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <sstream>

namespace rt = dls::runtime;
using json = nlohmann::json;

namespace {

struct reconfigure_options {
  dls::cli::cluster_flags cluster;
  std::string node, groups;
  bool json_out = false;
};

std::vector<int32_t> parse_groups(const std::string& text) {
  std::vector<int32_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      int v = std::stoi(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument("");
      out.push_back(v);
    } catch (const std::exception&) {
      throw std::runtime_error("--groups '" + text + "' must be positive sizes separated by commas, e.g. 2 or 1,1");
    }
  }
  if (out.empty()) throw std::runtime_error("--groups must not be empty");
  return out;
}

int run_reconfigure(const reconfigure_options& o) {
  rt::regroup_spec spec{o.node, parse_groups(o.groups)};
  rt::cluster_session session(o.cluster.find());
  const auto text =
      session.ask_text("reconfigure", std::chrono::minutes(10), rt::regroup_atom::value, spec, session.credential());
  auto j = json::parse(text);
  if (o.json_out) std::cout << text << "\n";
  if (!j.value("ok", false)) {
    if (!o.json_out) std::cerr << "dilaserve: error: reconfigure refused: " << j.value("error", "") << "\n";
    return 1;
  }
  if (!o.json_out) {
    std::cout << "node " << o.node << " regrouped in " << j["total_ms"].get<double>() << " ms";
    if (j["node_stats"].is_object())
      std::cout << " (drain " << j["node_stats"].value("drain_ms", 0.0) << " ms, "
                << j["node_stats"].value("moved", 0) << " requests moved as canvases, "
                << j["node_stats"].value("handed_back", 0) << " of them placed anew by the supervisor)";
    std::cout << "\n";
    for (auto& g : j["groups"]) std::cout << "  " << g["name"].get<std::string>() << " degree " << g["degree"] << "\n";
  }
  return 0;
}

dls::cli::register_command reg{"reconfigure", [](CLI::App& app) {
  auto* sub = app.add_subcommand("reconfigure", "Split or merge the TP groups of one node");
  auto o = std::make_shared<reconfigure_options>();
  sub->add_option("--node", o->node, "Node to regroup")->required();
  sub->add_option("--groups", o->groups, "New group sizes, e.g. 2 or 1,1")->required();
  o->cluster.add_to(sub);
  sub->add_flag("--json", o->json_out, "Print JSON");
  return std::function<int()>([o] { return run_reconfigure(*o); });
}};

}  // namespace
