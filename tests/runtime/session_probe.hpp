#pragma once
// Looks at a running cluster from the test's own process over one client session: a CLI
// process per look is slower than the shipped model's requests, so a test polling through the
// CLI can miss a state that lasts a few steps.
#include "runtime/client.hpp"
#include "runtime/messages.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <stdexcept>
#include <vector>

namespace dls::test {

inline std::vector<runtime::actor_info> directory_of(runtime::cluster_session& s) {
  caf::scoped_actor self{s.system()};
  std::vector<runtime::actor_info> rows;
  self->request(s.head(), std::chrono::seconds(10), runtime::actors_atom::value)
      .receive([&](std::vector<runtime::actor_info>& r) { rows = std::move(r); },
               [&](const caf::error& e) { throw std::runtime_error("actors: " + s.system().render(e)); });
  return rows;
}

}  // namespace dls::test
