#include "dilaserve/command_registry.hpp"

#include <algorithm>
#include <exception>
#include <iostream>
#include <map>
#include <string>

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
  if (argc > 1 && argv[1][0] != '-') {  // CLI11 would only say "a subcommand is required"
    const std::string name = argv[1];
    if (std::none_of(table.begin(), table.end(), [&](const auto& e) { return e.name == name; })) {
      std::string known;
      for (const auto& e : table) known += (known.empty() ? "" : ", ") + e.name;
      std::cerr << "dilaserve: error: unknown command '" << name << "' (commands: " << known << ")\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, like every other error, so scripts and logs can show it whole.
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    while (!msg.empty() && msg.back() == ' ') msg.pop_back();
    const std::string help = argc > 1 && argv[1][0] != '-' ? std::string("dilaserve ") + argv[1] + " --help"
                                                           : std::string("dilaserve --help");
    std::cerr << "dilaserve: error: " << msg << " (see " << help << ")\n";
    return 2;
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
