// The raw-peer attack on a head, played for real: a CAF program that never shows a token
// connects to the published port, builds proxies for the head's small sequential actor ids
// through its own BASP broker, and sends each of them what would read the status, submit
// work, register a fake TP group, and shut the cluster down. With mutual TLS (the default)
// it cannot even connect; with `auth.insecure: true` every actor refuses it. Then the roles:
// a submit-only credential cannot regroup or shut down.
#define BOOST_TEST_MODULE test_runtime_security
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "runtime/caf_setup.hpp"
#include "runtime/client.hpp"
#include "runtime/pki.hpp"
#include "runtime/state_dir.hpp"
#include "runtime/transport.hpp"

#include <caf/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/all.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace rt = dls::runtime;
using dls::test::cluster;

namespace {

using namespace std::chrono_literals;

struct attack_report {
  int probed = 0;
  std::vector<std::string> leaks;  // what the attacker obtained, if anything
  int fake_group_enqueues = 0;
};

// A TP group the attacker hopes the supervisor will place other users' prompts on.
caf::behavior fake_group(caf::event_based_actor*, std::shared_ptr<std::atomic<int>> enqueued) {
  return {
      [=](rt::enqueue_atom, rt::work_item&) {
        ++*enqueued;
        return true;
      },
  };
}

attack_report raw_peer_attack(const std::string& host, int port) {
  caf::actor_system_config cfg;
  rt::configure_caf(cfg, {});  // the attacker speaks DiLaServe's wire types, without TLS or token
  caf::actor_system sys{cfg};
  attack_report rep;
  auto gate = sys.middleman().remote_actor<rt::gate_actor>(host, static_cast<uint16_t>(port));
  if (!gate) BOOST_FAIL("the insecure head must accept a plain connection: " + sys.render(gate.error()));
  auto head_node = gate->node();
  auto broker = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto* basp = dynamic_cast<caf::io::basp_broker*>(caf::actor_cast<caf::abstract_actor*>(broker));
  BOOST_REQUIRE(basp != nullptr);
  auto enqueued = std::make_shared<std::atomic<int>>(0);
  auto fake = sys.spawn(fake_group, enqueued);
  // Every actor of the head is spawned before the gate, so its ids are the gate's and below.
  // One thread per id, so actors that drop a message silently cost one timeout, not one each.
  std::mutex mu;
  auto leak = [&](const std::string& what) {
    std::lock_guard<std::mutex> lk(mu);
    rep.leaks.push_back(what);
  };
  std::vector<std::thread> probes;
  auto last = gate->id() + 4;
  for (caf::actor_id id = 1; id <= last; ++id) {
    auto target = caf::actor_cast<caf::actor>(basp->proxy_registry_ptr()->get_or_put(head_node, id));
    if (!target) continue;
    ++rep.probed;
    probes.emplace_back([&, target, id] {
      caf::scoped_actor self{sys};
      auto where = "actor " + std::to_string(id);
      auto t = 1s;  // a real answer on loopback takes milliseconds
      self->request(target, t, rt::status_atom::value)
          .receive([&](const std::string& s) { leak(where + " status: " + s.substr(0, 80)); },
                   [](const caf::error&) {});
      self->request(target, t, rt::actors_atom::value)
          .receive([&](const std::vector<rt::actor_info>& v) {
                     leak(where + " directory rows: " + std::to_string(v.size()));
                   },
                   [](const caf::error&) {});
      rt::submit_spec spec;
      spec.prompt = "A8341.+962.....=";
      self->request(target, 3 * t, rt::submit_atom::value, spec)
          .receive([&](const rt::answer& a) { leak(where + " answered a submit: " + a.text + a.error); },
                   [](const caf::error&) {});
      rt::group_info g;
      g.name = "node0/evil";
      g.node = "node0";
      g.devices = {0};
      g.handle = fake;
      self->request(target, t, rt::groups_atom::value, std::string("node0"), std::vector<rt::group_info>{g},
                    std::vector<rt::actor_info>{})
          .receive([&](const std::vector<rt::group_info>& v) {
                     if (!v.empty()) leak(where + " registered the fake group");
                   },
                   [](const caf::error&) {});
      self->send(target, rt::groups_atom::value, std::string("node0"), std::vector<rt::group_info>{g});
      self->request(target, t, rt::shutdown_atom::value)
          .receive([&](const std::string& s) { leak(where + " accepted shutdown: " + s); }, [](const caf::error&) {});
      self->request(target, t, rt::shutdown_atom::value, std::string("a guessed token"))
          .receive([&](const std::string& s) { leak(where + " accepted shutdown: " + s); }, [](const caf::error&) {});
      self->request(target, t, rt::shutdown_atom::value, caf::ok_atom::value)
          .receive([&]() { leak(where + " accepted the final shutdown"); }, [](const caf::error&) {});
    });
  }
  for (auto& th : probes) th.join();
  rep.fake_group_enqueues = enqueued->load();
  caf::anon_send_exit(fake, caf::exit_reason::user_shutdown);
  return rep;
}

std::string addr(const cluster& c) {
  auto st = rt::load_state(c.state_dir());
  return st.head_host + ":" + std::to_string(st.head_port);
}

void serves_normally(const cluster& c) {
  auto problems = dls::test::eval_problems(4);
  auto file = dls::test::write_prompts(c.scratch(), problems);
  auto r = c.cli({"submit", "--file", file});
  BOOST_TEST(r.rc == 0, r.out + r.err);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_plain_or_foreign_peer_cannot_even_connect_to_a_tls_head) {
  cluster c("local.yaml");
  auto st = rt::load_state(c.state_dir());
  BOOST_REQUIRE(!st.insecure);
  BOOST_REQUIRE(rt::pki_complete(st.tls_dir));

  // 1. The raw peer without TLS: the handshake never completes, so no byte reaches BASP.
  {
    caf::actor_system_config cfg;
    rt::configure_caf(cfg, {});
    caf::actor_system sys{cfg};
    auto t0 = std::chrono::steady_clock::now();
    auto gate = sys.middleman().remote_actor<rt::gate_actor>(st.head_host, static_cast<uint16_t>(st.head_port));
    BOOST_TEST(!gate, "a plain CAF peer reached the gate of a TLS head");
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 30s));
  }
  // 2. Anonymous TLS (CAF's openssl module without certificates): refused.
  {
    caf::actor_system_config cfg;
    rt::configure_caf(cfg, {}, true);
    caf::actor_system sys{cfg};
    auto gate = caf::openssl::remote_actor<rt::gate_actor>(sys, st.head_host, static_cast<uint16_t>(st.head_port));
    BOOST_TEST(!gate, "an anonymous TLS peer reached the gate");
  }
  // 3. A certificate of another CA, with the right token: refused at the handshake.
  {
    dls::test::scratch_dir other;
    rt::make_cluster_pki(other.path(), "evil");
    caf::actor_system_config cfg;
    rt::configure_networked_caf(cfg, {}, {true, other.path(), "admin"});
    caf::actor_system sys{cfg};
    auto gate = rt::connect_gate(sys, st.head_host, static_cast<uint16_t>(st.head_port), {true, other.path(), "admin"});
    BOOST_TEST(!gate, "a peer with a foreign CA's certificate reached the gate");
  }
  // 4. The CLI without --tls-dir against an address it has no state for: a clear error.
  auto token = c.scratch().file("t");
  rt::write_token(token, rt::read_token(st.token_file));
  auto r = dls::test::run_cli({"status", "--address", addr(c), "--token-file", token, "--state-dir",
                               c.scratch().file("none")});
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.err.find("needs --tls-dir") != std::string::npos, r.err);
  // ... and --insecure against a TLS head fails at the handshake, saying what to do.
  r = dls::test::run_cli({"status", "--address", addr(c), "--token-file", token, "--insecure", "--state-dir",
                          c.scratch().file("none")});
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.err.find("cannot reach the head") != std::string::npos, r.err);
  // The right certificates work, and the cluster serves.
  r = dls::test::run_cli({"status", "--address", addr(c), "--token-file", token, "--tls-dir", st.tls_dir,
                          "--state-dir", c.scratch().file("none")});
  BOOST_TEST(r.rc == 0, r.err);
  serves_normally(c);
}

namespace {

// A certificate as releases before role-specific key usages issued them: this CA's, the
// client's name, and usable to serve TLS as well as to connect.
void issue_legacy_client_certificate(const std::string& dir) {
  const std::string ext = dir + "/legacy.ext";
  std::ofstream(ext) << "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n";
  const std::string cmd = "cd '" + dir + "' && umask 077 && openssl ecparam -name prime256v1 -genkey -noout -out legacy.key "
                          "&& openssl req -new -key legacy.key -subj /CN=dilaserve-client.t -out legacy.csr "
                          "&& openssl x509 -req -in legacy.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
                          "-extfile legacy.ext -out legacy.pem 2>/dev/null";
  BOOST_REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "openssl could not issue the legacy certificate");
}

// A TLS server of this cluster's CA presenting `role`'s certificate, where a head would listen.
struct tls_server {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor listener;
  uint16_t port = 0;
  tls_server(const std::string& dir, const std::string& role) {
    rt::configure_networked_caf(cfg, {}, {true, dir, role});
    sys = std::make_unique<caf::actor_system>(cfg);
    listener = sys->spawn([]() -> caf::behavior { return {[](int) {}}; });
    auto p = caf::openssl::publish(listener, 0, "127.0.0.1", true);
    if (!p) BOOST_FAIL("cannot publish with the " + role + " certificate: " + sys->render(p.error()));
    port = *p;
  }
  ~tls_server() { caf::anon_send_exit(listener, caf::exit_reason::user_shutdown); }  // the system waits for it
};

}  // namespace

// Every role's certificate chains to the one cluster CA; only the head's may serve. A holder
// of the submit-only client certificate (or a node's, or an admin's) who takes the head's
// address is refused by every program that connects, before it sends a token.
BOOST_AUTO_TEST_CASE(only_the_heads_certificate_can_stand_for_the_head) {
  dls::test::scratch_dir dir;
  rt::make_cluster_pki(dir.path(), "t");
  issue_legacy_client_certificate(dir.path());
  const rt::transport_security as_node{true, dir.path(), "node"};
  caf::actor_system_config cfg;
  rt::configure_networked_caf(cfg, {}, as_node);
  caf::actor_system sys{cfg};
  for (const std::string role : {"client", "node", "admin", "legacy"}) {
    tls_server impostor(dir.path(), role);
    auto gate = rt::connect_gate(sys, "127.0.0.1", impostor.port, as_node, 10s);
    BOOST_REQUIRE_MESSAGE(!gate, "a node reached a '" + role + "' certificate's server as its head");
    const auto why = sys.render(gate.error());
    BOOST_TEST(why.find("not the head's") != std::string::npos, role << ": " << why);
    // CAF's own handshake, without the probe before it, refuses too.
    auto raw = caf::openssl::remote_actor(sys, "127.0.0.1", impostor.port);
    BOOST_TEST(!raw, role);
  }
  // The head's own certificate passes the handshake (this listener is no gate, which the node
  // is then told).
  tls_server head(dir.path(), "head");
  auto gate = rt::connect_gate(sys, "127.0.0.1", head.port, as_node, 10s);
  BOOST_REQUIRE(!gate);
  const auto why = sys.render(gate.error());
  BOOST_TEST(why.find("is not a DiLaServe head") != std::string::npos, why);
  BOOST_TEST(why.find("TLS") == std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(the_raw_peer_attack_is_refused_at_every_step_without_tls) {
  cluster c("local.yaml", 0, "auth: {token: local-dev-token-change-me, insecure: true}");
  BOOST_TEST(c.up_error_output().find("auth.insecure is true") != std::string::npos, c.up_error_output());
  auto st = rt::load_state(c.state_dir());
  BOOST_REQUIRE(st.insecure);

  auto rep = raw_peer_attack(st.head_host, st.head_port);
  BOOST_TEST(rep.probed > 5);
  for (auto& leak : rep.leaks) BOOST_ERROR("the attacker got: " << leak);

  // The head is still up, no fake group was registered, and every answer comes from a real one.
  auto status = c.json_cli({"status"});
  for (auto& g : status["groups"]) BOOST_TEST(g["name"].get<std::string>().find("evil") == std::string::npos);
  serves_normally(c);
  BOOST_TEST(rep.fake_group_enqueues == 0);
  // The refusals are in the head's log, bounded (one line per 256).
  std::ifstream log(st.processes.front().log);
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  BOOST_TEST(text.find("refused a message from unauthenticated node") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_submit_only_credential_cannot_regroup_or_shut_down) {
  cluster c("local.yaml", 0,
            "auth: {token: local-dev-token-change-me, submit_token: submit-only-token-123, "
            "node_token: node-only-token-456}");
  dls::test::scratch_dir dir;
  auto st = rt::load_state(c.state_dir());
  auto submit_token = dir.file("submit.token");
  rt::write_token(submit_token, "submit-only-token-123");
  auto node_token = dir.file("node.token");
  rt::write_token(node_token, "node-only-token-456");
  auto as = [&](const std::string& token, std::vector<std::string> args) {
    args.insert(args.end(), {"--address", addr(c), "--token-file", token, "--tls-dir", st.tls_dir, "--state-dir",
                             dir.file("none")});
    return dls::test::run_cli(args);
  };
  // It can submit and read the status ...
  auto r = as(submit_token, {"submit", "--prompt", "A8341.+962.....="});
  BOOST_TEST(r.rc == 0, r.err);
  BOOST_TEST(as(submit_token, {"status"}).rc == 0);
  // ... but not regroup or shut down.
  r = as(submit_token, {"reconfigure", "--node", "node0", "--groups", "1,1"});
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.err.find("permission denied") != std::string::npos, r.err);
  r = as(submit_token, {"policy", "set", "static"});
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.err.find("permission denied") != std::string::npos, r.err);
  // The node credential cannot act as a client at all.
  r = as(node_token, {"status"});
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.err.find("invalid cluster token") != std::string::npos, r.err);
  // A submit-only client that calls shutdown directly (what `down` sends) is refused.
  {
    auto where = rt::find_cluster(dir.file("none"), addr(c), submit_token, st.tls_dir);
    rt::cluster_session s(where);
    caf::scoped_actor self{s.system()};
    std::string got, err;
    self->request(s.head(), 10s, rt::shutdown_atom::value, s.credential())
        .receive([&](const std::string& x) { got = x; }, [&](const caf::error& e) { err = s.system().render(e); });
    BOOST_TEST(got.empty());
    BOOST_TEST(err.find("permission denied") != std::string::npos, err);
  }
  // The cluster is unchanged and serves; the admin token (the state directory's) still works.
  auto groups = c.json_cli({"status"})["groups"];
  BOOST_TEST(groups.size() == 1u);
  serves_normally(c);
  BOOST_TEST(c.cli({"reconfigure", "--node", "node0", "--groups", "1,1"}).rc == 0);
}
