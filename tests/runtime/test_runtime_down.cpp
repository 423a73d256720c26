// `down` signals a recorded pid only while it is still the recorded process: a stale
// state file whose pid now belongs to an unrelated process leaves that process alone.
#define BOOST_TEST_MODULE test_runtime_down
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

namespace rt = dls::runtime;
using dls::test::scratch_dir;

namespace {

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// A real process of ours standing in for "whatever now has the recorded pid".
class sleeper {
 public:
  sleeper() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Its identity is only its own once it has exec'd.
    dls::test::eventually(10, [&] {
      auto id = rt::read_identity(pid_);
      return id && !id->cmdline.empty() && id->cmdline[0] == "sleep";
    });
  }
  ~sleeper() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int pid() const { return pid_; }
  // True while it runs (not a zombie waiting for us).
  bool running() const { return rt::process_alive(pid_); }
  // Reaps it once `down` ended it; returns the signal that did.
  int reap() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }

 private:
  int pid_ = -1;
};

// A loopback port nobody listens on, so `down` cannot reach a head and falls back to signals.
int closed_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

std::string write_state(const scratch_dir& dir, int pid, const rt::process_identity& identity) {
  auto state_dir = dir.file("state");
  rt::cluster_state st;
  st.cluster = "stale";
  st.config_file = dir.file("gone.yaml");
  st.head_host = "127.0.0.1";
  st.head_port = closed_port();
  st.token_file = dir.file("state/token");
  rt::write_token(st.token_file, "stale-token-123");
  st.processes.push_back({"head", "head", pid, dir.file("head.log"), identity});
  rt::save_state(state_dir, st);
  return state_dir;
}

dls::test::cli_result down(const std::string& state_dir) {
  return dls::test::run_cli({"down", "--state-dir", state_dir, "--timeout", "4"});
}

}  // namespace

BOOST_AUTO_TEST_CASE(identity_reads_start_time_and_command_line) {
  sleeper s;
  auto id = rt::read_identity(s.pid());
  BOOST_REQUIRE(id.has_value());
  BOOST_TEST(id->start_ticks > 0u);
  BOOST_TEST(!id->boot_id.empty());
  BOOST_TEST((id->cmdline == std::vector<std::string>{"sleep", "300"}));
  auto self = rt::read_identity(static_cast<int>(::getpid()));
  BOOST_REQUIRE(self.has_value());
  BOOST_TEST(self->start_ticks <= id->start_ticks);  // the child started after us
  BOOST_TEST((rt::signal_if_same(s.pid(), *id, 0).result == rt::signal_result::sent));
  auto later = *id;
  later.start_ticks += 1;
  BOOST_TEST((rt::signal_if_same(s.pid(), later, SIGTERM).result == rt::signal_result::other_process));
  BOOST_TEST(s.running());
}

BOOST_AUTO_TEST_CASE(a_reused_pid_with_another_start_time_survives_down) {
  scratch_dir dir;
  sleeper unrelated;
  auto recorded = *rt::read_identity(unrelated.pid());
  recorded.start_ticks -= 1;  // the recorded head started just before: another process
  recorded.cmdline = {"/usr/bin/dilaserve", "start", "--head", "--config", "gone.yaml"};
  auto r = down(write_state(dir, unrelated.pid(), recorded));
  BOOST_TEST(r.rc == 0, r.err);
  BOOST_TEST(contains(r.out, "skipped pid " + std::to_string(unrelated.pid()) + " (head head): it started at tick"),
             r.out);
  BOOST_TEST(contains(r.out, "1 skipped: not the recorded process"), r.out);
  BOOST_TEST(unrelated.running());
}

BOOST_AUTO_TEST_CASE(a_reused_pid_with_another_command_line_survives_down) {
  scratch_dir dir;
  sleeper unrelated;
  auto recorded = *rt::read_identity(unrelated.pid());
  recorded.cmdline = {"/usr/bin/dilaserve", "start", "--head", "--config", "gone.yaml"};
  auto r = down(write_state(dir, unrelated.pid(), recorded));
  BOOST_TEST(r.rc == 0, r.err);
  BOOST_TEST(contains(r.out, "its command line is 'sleep 300', not the recorded '/usr/bin/dilaserve start"), r.out);
  BOOST_TEST(unrelated.running());
}

BOOST_AUTO_TEST_CASE(a_state_file_without_identities_signals_nothing) {
  scratch_dir dir;
  sleeper unrelated;
  auto r = down(write_state(dir, unrelated.pid(), {}));
  BOOST_TEST(r.rc == 0, r.err);
  BOOST_TEST(contains(r.out, "records no start time"), r.out);
  BOOST_TEST(unrelated.running());
}

BOOST_AUTO_TEST_CASE(the_recorded_process_itself_is_stopped) {
  scratch_dir dir;
  sleeper mine;
  auto r = down(write_state(dir, mine.pid(), *rt::read_identity(mine.pid())));
  BOOST_TEST(r.rc == 0, r.err);
  BOOST_TEST(!contains(r.out, "skipped"), r.out);
  BOOST_TEST(mine.reap() == SIGTERM);
}

BOOST_AUTO_TEST_CASE(up_records_identities_and_down_stops_the_cluster) {
  std::vector<rt::process_record> procs;
  {
    dls::test::cluster c("local.yaml");
    procs = rt::load_state(c.state_dir()).processes;
    // The head, its watchdog (which restarts it) and the node.
    BOOST_REQUIRE_EQUAL(procs.size(), 3u);
    BOOST_TEST(procs.at(0).role == "head");
    BOOST_TEST(procs.at(1).role == "head-watchdog");
    for (auto& p : procs) {
      auto now = rt::read_identity(p.pid);
      BOOST_REQUIRE(now.has_value());
      BOOST_TEST(p.identity.start_ticks == now->start_ticks);
      BOOST_TEST(p.identity.cmdline == now->cmdline);
      BOOST_TEST(p.identity.cmdline.at(1) == "start");
    }
    auto r = c.cli({"down"});
    BOOST_TEST(r.rc == 0, r.err);
    BOOST_TEST(contains(r.out, "via shutdown command"), r.out);
    BOOST_TEST(!contains(r.out, "skipped"), r.out);
  }
  for (auto& p : procs) BOOST_TEST(!rt::process_alive(p.pid));
}
