#pragma once
// Subcommands of the dilaserve CLI register themselves here so that each lives in
// its own cmd_*.cpp file and main.cpp never changes when an area adds a command.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dls::cli {

/// Adds a subcommand to `app` and returns the function to run when it is chosen.
/// The function returns the process exit code.
using command_factory = std::function<std::function<int()>(CLI::App& app)>;

struct command_entry {
  std::string name;  // for ordering help output
  command_factory factory;
};

std::vector<command_entry>& command_table();

struct register_command {
  register_command(std::string name, command_factory f);
};

}  // namespace dls::cli
