// `dilaserve down`: stop the recorded cluster cleanly and make sure no process is left.
#include "dilaserve/command_registry.hpp"
#include "runtime/client.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <caf/scoped_actor.hpp>

#include <signal.h>

#include <filesystem>
#include <iostream>
#include <memory>

namespace rt = dls::runtime;

namespace {

struct down_options {
  std::string state_dir;
  int timeout_s = 20;
};

int run_down(const down_options& o) {
  auto dir = rt::resolve_state_dir(o.state_dir);
  auto st = rt::load_state(dir);
  std::string how = "shutdown command";
  try {
    rt::cluster_session session(rt::address_of(st));
    caf::scoped_actor self{session.system()};
    self->request(session.head(), std::chrono::seconds(10), rt::shutdown_atom::value, session.credential())
        .receive([](const std::string&) {},
                 [&](const caf::error& e) { how = "signals (head: " + session.system().render(e) + ")"; });
  } catch (const std::exception& e) {
    how = std::string("signals (") + e.what() + ")";
  }
  int forced = 0, skipped = 0;
  // A recorded pid may since belong to another process: it is signalled only while its
  // start time and command line still match the state file.
  auto skip = [&](const rt::process_record& p, const std::string& why) {
    std::cout << "skipped pid " << p.pid << " (" << p.role << " " << p.name << "): " << why << "\n";
    ++skipped;
  };
  // Processes that did not exit by themselves get SIGTERM, then SIGKILL: none of ours is left.
  for (const auto& p : st.processes) {
    auto mine = rt::signal_if_same(p.pid, p.identity, 0);
    if (mine.result == rt::signal_result::exited) continue;
    if (mine.result == rt::signal_result::other_process) {
      skip(p, mine.why);
      continue;
    }
    if (rt::wait_exit(p.pid, o.timeout_s * 1000 / 2)) continue;
    auto term = rt::signal_if_same(p.pid, p.identity, SIGTERM);
    if (term.result != rt::signal_result::sent) {
      if (term.result == rt::signal_result::other_process) skip(p, term.why);
      continue;
    }
    if (rt::wait_exit(p.pid, o.timeout_s * 1000 / 2)) continue;
    if (rt::signal_if_same(p.pid, p.identity, SIGKILL).result != rt::signal_result::sent) continue;
    rt::wait_exit(p.pid, 5000);
    ++forced;
  }
  std::filesystem::remove(rt::state_file(dir));
  std::cout << "cluster '" << st.cluster << "' stopped (" << st.processes.size() << " processes, via " << how;
  if (forced) std::cout << ", " << forced << " killed";
  if (skipped) std::cout << ", " << skipped << " skipped: not the recorded process";
  std::cout << ")\n";
  return 0;
}

dls::cli::register_command reg{"down", [](CLI::App& app) {
  auto* sub = app.add_subcommand("down", "Stop the cluster recorded in the state directory");
  auto o = std::make_shared<down_options>();
  sub->add_option("--state-dir", o->state_dir, "State directory (default $DILASERVE_STATE_DIR or ~/.dilaserve)");
  sub->add_option("--timeout", o->timeout_s, "Seconds to wait for the processes to exit");
  return std::function<int()>([o] { return run_down(*o); });
}};

}  // namespace
