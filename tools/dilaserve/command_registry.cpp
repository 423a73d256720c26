#include "dilaserve/command_registry.hpp"

namespace dls::cli {

std::vector<command_entry>& command_table() {
  static std::vector<command_entry> table;
  return table;
}

register_command::register_command(std::string name, command_factory f) {
  command_table().push_back({std::move(name), std::move(f)});
}

}  // namespace dls::cli
