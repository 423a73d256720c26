#include "dilaserve/command_registry.hpp"

#include <algorithm>
#include <exception>
#include <iostream>
#include <map>

int main(int argc, char** argv) {
  CLI::App app{"dilaserve: serving system for diffusion language models"};
  app.require_subcommand(1);
  auto& table = dls::cli::command_table();
  std::sort(table.begin(), table.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& entry : table) {
    auto run = entry.factory(app);
    auto subs = app.get_subcommands({});
    runners[subs.back()] = std::move(run);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands())
      if (auto it = runners.find(sub); it != runners.end()) return it->second();
  } catch (const std::exception& e) {
    std::cerr << "dilaserve: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
