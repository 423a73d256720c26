#pragma once
// Looks at a running cluster from the test's own process over one client session: a CLI
// process per look is slower than the shipped model's requests, so a test polling through the
// CLI can miss a state that lasts a few steps.
#include "runtime/client.hpp"
#include "runtime/messages.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
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

/// The request rows' details by request id, optionally only those in `state` (ALIVE, DEAD).
inline std::map<uint64_t, nlohmann::json> request_rows(runtime::cluster_session& s, const std::string& state = "") {
  std::map<uint64_t, nlohmann::json> out;
  for (const auto& a : directory_of(s)) {
    if (a.kind != "request" || (!state.empty() && a.state != state)) continue;
    out[std::stoull(a.name.substr(a.name.find('-') + 1))] = nlohmann::json::parse(a.details, nullptr, false);
  }
  return out;
}

/// `dilaserve migrate` in this process: the head's answer ({ok, ...} or {ok: false, error}).
inline nlohmann::json migrate_request(runtime::cluster_session& s, uint64_t id, const std::string& to,
                                      const std::string& at) {
  caf::scoped_actor self{s.system()};
  std::string text;
  self->request(s.head(), std::chrono::seconds(30), runtime::migrate_atom::value, id, to, at, s.credential())
      .receive([&](std::string& t) { text = std::move(t); },
               [&](const caf::error& e) { throw std::runtime_error("migrate: " + s.system().render(e)); });
  return nlohmann::json::parse(text);
}

/// Two nodes with two TP-1 groups each: every move between them keeps the degree, so answers
/// compare with the TP-1 reference.
inline const char* const two_by_two = R"(nodes:
  - {name: node0, host: 127.0.0.1, devices: {kind: cpu, count: 2}, groups: [1, 1]}
  - {name: node1, host: 127.0.0.1, devices: {kind: cpu, count: 2}, groups: [1, 1]})";

}  // namespace dls::test
