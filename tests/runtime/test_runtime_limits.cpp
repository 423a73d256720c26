// Bounds at the edge: every length and number of a submit is checked by the first process
// that receives it (the CLI, then the head), a refused request never reaches a node, and
// the cluster serves normally right after each refusal.
#define BOOST_TEST_MODULE test_runtime_limits
#include <boost/test/unit_test.hpp>

#include "actors/request_admission.hpp"
#include "cluster_fixture.hpp"
#include "runtime/client.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/request_limits.hpp"

#include <caf/scoped_actor.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace rt = dls::runtime;
using dls::test::cluster;
using json = nlohmann::json;

namespace {

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

const char* base_yaml = R"(name: t
auth: {token: secret-token}
head: {host: 127.0.0.1, port: 0}
nodes:
  - name: a
    devices: {kind: cpu, count: 2}
model: {path: /tmp}
)";

std::string config_error_of(const std::string& extra) {
  try {
    rt::parse_cluster_config(std::string(base_yaml) + extra, "bad.yaml", "/tmp");
  } catch (const rt::config_error& e) {
    return e.what();
  }
  return "";
}

// A checker for a model of 64 tokens with one token per byte, like the shipped one.
rt::request_checker byte_model_checker(rt::request_limits limits) {
  rt::model_bounds m;
  m.max_seq = 64;
  m.count_tokens = [](const std::string& s) { return static_cast<int64_t>(s.size()); };
  return rt::request_checker(limits, 16, m);
}

// Submits `spec` straight to the head endpoint, as an embedding program or a client that
// skips the CLI's own checks would.
rt::answer submit_raw(const cluster& c, rt::submit_spec spec) {
  rt::cluster_session session(rt::find_cluster(c.state_dir(), "", ""));
  caf::scoped_actor self{session.system()};
  rt::answer out;
  out.error = "no answer";
  self->request(session.head(), std::chrono::seconds(120), rt::submit_atom::value, std::move(spec))
      .receive([&](rt::answer& a) { out = std::move(a); },
               [&](caf::error& e) { out.error = "caf error: " + session.system().render(e); });
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

BOOST_AUTO_TEST_CASE(checker_refuses_each_bound_with_one_line) {
  rt::request_limits l;
  l.max_prompt_bytes = 40;
  l.max_prompt_tokens = 30;
  l.max_gen_length = 32;
  auto c = byte_model_checker(l);
  BOOST_TEST(c.check("abc", -1, 0).empty());   // defaults
  BOOST_TEST(c.check("abc", 0.5, 32).empty());
  BOOST_TEST(contains(c.check("", -1, 0), "the prompt is empty"));
  BOOST_TEST(contains(c.check(std::string(41, 'x'), -1, 0), "41 bytes; this cluster accepts at most 40 (limits.max_prompt_bytes)"));
  BOOST_TEST(contains(c.check("abc", std::nan(""), 0), "threshold is NaN"));
  BOOST_TEST(contains(c.check("abc", INFINITY, 0), "outside [0, 1]"));
  BOOST_TEST(contains(c.check("abc", 1.5, 0), "threshold 1.5 is outside [0, 1]"));
  BOOST_TEST(contains(c.check("abc", -1, 33), "gen_length 33 exceeds this cluster's limit of 32"));
  // The case that wrapped a 32-bit sum negative in the node's admission.
  BOOST_TEST(contains(c.check("abc", -1, std::numeric_limits<int32_t>::max()), "gen_length 2147483647 exceeds"));
  BOOST_TEST(contains(c.check(std::string(31, 'x'), -1, 0), "31 tokens; this cluster accepts at most 30"));
  BOOST_TEST(c.check(std::string(30, 'x'), -1, 32).empty());  // 62 of 64 tokens: fits
  for (const auto& why : {c.check("", -1, 0), c.check("abc", std::nan(""), 0)}) BOOST_TEST(!contains(why, "\n"));

  // Without configured token/answer caps the model's context is the bound.
  auto open = byte_model_checker({});
  BOOST_TEST(contains(open.check("abc", -1, 65), "exceeds the model's context of 64 tokens"));
  BOOST_TEST(contains(open.check(std::string(40, 'x'), -1, 32),
                      "the prompt (40 tokens) plus gen_length 32 exceeds the model's context of 64"));
  BOOST_TEST(open.check(std::string(48, 'x'), -1, 16).empty());
  // A client that knows no model checks bytes and numbers only.
  rt::request_checker blind({}, 16, {});
  BOOST_TEST(blind.check(std::string(1000, 'x'), -1, 4000).empty());
  BOOST_TEST(contains(blind.check(std::string((1 << 20) + 1, 'x'), -1, 0), "limits.max_prompt_bytes"));
}

BOOST_AUTO_TEST_CASE(limits_and_retention_parse_strictly) {
  auto cfg = rt::parse_cluster_config(std::string(base_yaml) +
                                          "limits: {max_prompt_bytes: 4096, max_prompt_tokens: 48, max_gen_length: 32}\n"
                                          "retention: {finished_requests: 5, finished_age_s: 0}\n",
                                      "ok.yaml", "/tmp");
  BOOST_TEST(cfg.limits.max_prompt_bytes == 4096);
  BOOST_TEST(cfg.limits.max_prompt_tokens == 48);
  BOOST_TEST(cfg.limits.max_gen_length == 32);
  BOOST_TEST(cfg.retention.finished_requests == 5);
  BOOST_TEST(cfg.retention.finished_age_s == 0);
  auto defaults = rt::parse_cluster_config(base_yaml, "ok.yaml", "/tmp");
  BOOST_TEST(defaults.limits.max_prompt_bytes == (1 << 20));
  BOOST_TEST(defaults.retention.finished_requests == 1000);

  BOOST_TEST(contains(config_error_of("limits: {max_prompt_bytes: 0}\n"), "limits.max_prompt_bytes must be in [1, "));
  BOOST_TEST(contains(config_error_of("limits: {max_prompt_bytes: 99999999999}\n"), "limits.max_prompt_bytes must be in"));
  BOOST_TEST(contains(config_error_of("limits: {max_gen_length: -1}\n"), "limits.max_gen_length must be in"));
  BOOST_TEST(contains(config_error_of("limits: {max_gen: 3}\n"), "unknown key 'max_gen' in limits"));
  BOOST_TEST(contains(config_error_of("limits: {max_gen_length: 8}\n"), "engine.gen_length (32) exceeds limits.max_gen_length (8)"));
  BOOST_TEST(contains(config_error_of("retention: {finished_requests: many}\n"), "must be an integer, got 'many'"));
  BOOST_TEST(contains(config_error_of("retention: {finished_age_s: -5}\n"), "retention.finished_age_s must be in"));
  BOOST_TEST(config_error_of("limits: {max_prompt_bytes: 0}\n").rfind("bad.yaml:8:", 0) == 0u);
}

BOOST_AUTO_TEST_CASE(the_shipped_model_bounds_the_head_checker) {
  rt::cluster_config cfg;
  cfg.model_path = dls::test::model_dir();
  std::string problem;
  auto c = dls::actors::make_request_checker(cfg, &problem);
  BOOST_TEST(problem.empty(), problem);
  BOOST_TEST(c->max_seq() == 64);
  BOOST_TEST(contains(c->check(std::string(60, 'a'), -1, 0), "the prompt (60 tokens) plus gen_length 32"));
  cfg.model_path = "/nonexistent-model-dir";
  auto blind = dls::actors::make_request_checker(cfg, &problem);
  BOOST_TEST(!problem.empty());
  BOOST_TEST(blind->check(std::string(60, 'a'), -1, 0).empty());  // the nodes check the context then
}

// Every refusal, at the head (a raw client) and at the CLI, followed at once by a request
// that is answered normally; none of the refused ones reaches the node.
BOOST_AUTO_TEST_CASE(each_limit_is_refused_and_the_cluster_serves_right_after) {
  cluster c("local.yaml", 0, "limits: {max_prompt_bytes: 4096, max_prompt_tokens: 40, max_gen_length: 32}\n");
  auto good = dls::test::eval_problems(1).at(0);
  auto serve_one = [&](const std::string& after) {
    rt::submit_spec ok;
    ok.prompt = good.prompt;
    auto a = submit_raw(c, ok);
    BOOST_TEST(a.ok, "after " << after << ": " << a.error);
    BOOST_TEST(!a.text.empty());
  };
  serve_one("start");
  int served = 1;

  struct bad_case {
    std::string name;
    std::string prompt;
    double threshold;
    int32_t gen_length;
    std::string words;
  };
  std::vector<bad_case> cases{
      {"100 MB prompt", std::string(100u << 20, 'a'), -1, 0, "104857600 bytes; this cluster accepts at most 4096"},
      {"prompt bytes", std::string(4097, 'a'), -1, 0, "4097 bytes"},
      {"prompt tokens", std::string(41, 'a'), -1, 0, "41 tokens; this cluster accepts at most 40"},
      {"context", std::string(40, 'a'), -1, 32, "plus gen_length 32 exceeds the model's context of 64"},
      {"gen_length int32 max", good.prompt, -1, std::numeric_limits<int32_t>::max(), "gen_length 2147483647 exceeds"},
      {"gen_length", good.prompt, -1, 33, "gen_length 33 exceeds this cluster's limit of 32"},
      {"threshold NaN", good.prompt, std::nan(""), 0, "threshold is NaN"},
      {"threshold inf", good.prompt, INFINITY, 0, "outside [0, 1]"},
      {"threshold 2", good.prompt, 2.0, 0, "threshold 2 is outside [0, 1]"},
      {"empty prompt", "", -1, 0, "the prompt is empty"},
  };
  for (auto& bc : cases) {
    rt::submit_spec spec;
    spec.prompt = bc.prompt;
    spec.threshold = bc.threshold;
    spec.gen_length = bc.gen_length;
    spec.tag = 77;
    auto a = submit_raw(c, spec);
    BOOST_TEST(!a.ok, bc.name);
    BOOST_TEST(contains(a.error, "refused by the head: "), bc.name << ": " << a.error);
    BOOST_TEST(contains(a.error, bc.words), bc.name << ": " << a.error);
    BOOST_TEST(a.tag == 77u);
    BOOST_TEST(a.request_id == 0u, bc.name << ": no request was made");
    serve_one(bc.name);
    ++served;
  }

  // The CLI refuses the same before sending (exit 1, one line), and the cluster serves on.
  struct cli_case {
    std::vector<std::string> args;
    std::string words;
  };
  auto big = c.scratch().file("big.jsonl");
  std::ofstream(big) << json{{"prompt", std::string(5000, 'a')}}.dump() << "\n";
  auto range = c.scratch().file("range.jsonl");
  std::ofstream(range) << json{{"prompt", good.prompt}}.dump() << "\n\n"
                       << json{{"prompt", good.prompt}, {"gen_length", 1e10}}.dump() << "\n";
  auto tau = c.scratch().file("tau.jsonl");
  std::ofstream(tau) << json{{"prompt", good.prompt}, {"threshold", 5}}.dump() << "\n";
  std::vector<cli_case> cli_cases{
      {{"submit", "--prompt", ""}, "the prompt is empty"},
      {{"submit", "--prompt", good.prompt, "--threshold", "nan"}, "--threshold: 'nan' is not a number"},
      {{"submit", "--prompt", good.prompt, "--threshold", "inf"}, "--threshold: 'inf' is not a number"},
      {{"submit", "--prompt", good.prompt, "--gen-length", "2147483647"}, "gen_length 2147483647 exceeds this cluster's limit of 32"},
      {{"submit", "--prompt", std::string(41, 'a')}, "41 tokens; this cluster accepts at most 40"},
      {{"submit", "--file", big}, big + ":1: the prompt is 5000 bytes; this cluster accepts at most 4096"},
      {{"submit", "--file", range}, range + ":3: \"gen_length\" must be an integer in [1, 2147483647], got 10000000000.0"},
      {{"submit", "--file", tau}, tau + ":1: \"threshold\" must be a number in [0, 1], got 5"},
  };
  for (auto& cc : cli_cases) {
    auto r = c.cli(cc.args);
    BOOST_TEST(r.rc != 0, cc.words);
    BOOST_TEST(contains(r.err, cc.words), r.err);
    BOOST_TEST(r.err.find('\n') == r.err.size() - 1, r.err);  // one line
    auto ok = c.cli({"submit", "--prompt", good.prompt});
    BOOST_TEST(ok.rc == 0, "after `" << cc.words << "`: " << ok.err);
    ++served;
  }

  // Only the served requests became requests; the node never saw a refused one.
  auto status = c.json_cli({"status"});
  BOOST_TEST(status["requests"]["finished"].get<int>() == served);
  BOOST_TEST(status["requests"]["failed"].get<int>() == 0);
  BOOST_TEST(!contains(read_file(c.state_dir() + "/logs/node0.log"), "rejected"));
}
