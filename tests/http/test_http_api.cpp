// The HTTP API against a live cluster, with curl as the client: keys on every route
// that needs one, every error code in OpenAI's shape, limits that leave the cluster
// serving, a client that disconnects mid-stream, and the metrics promtool accepts.
#define BOOST_TEST_MODULE http_api
#include "http_support.hpp"

#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/state_dir.hpp"

#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

using namespace dls::test;
using json = nlohmann::json;

namespace {

// One cluster for the cases that leave it as they found it.
const http_cluster& shared() {
  static auto c = std::make_unique<http_cluster>();
  return *c;
}

std::string completion(const std::string& prompt, int gen_length = 16) {
  return json{{"model", "tiny-llada"}, {"prompt", prompt}, {"gen_length", gen_length}}.dump();
}

// The error object of a reply, checked for OpenAI's shape.
json error_of(const http_reply& r) {
  auto j = json::parse(r.body, nullptr, false);
  BOOST_TEST_REQUIRE(j.is_object(), "not JSON: " << r.body);
  BOOST_TEST_REQUIRE(j.contains("error"), r.body);
  BOOST_TEST(j["error"]["message"].is_string());
  BOOST_TEST(j["error"]["type"].is_string());
  return j["error"];
}

struct decoded {
  std::string text;
  int64_t steps = 0;
};

// What the engine answers for `p` with configs/local.yaml's settings changed by `change`: the
// request's settings as `dilaserve generate` would pass them to the canvas.
decoded engine_decode(const problem& p, const std::function<void(dls::gpu::decode_params&)>& change) {
  auto cfg = dls::runtime::load_cluster_config(std::string(DLS_SOURCE_DIR) + "/configs/local.yaml");
  static auto model = dls::gpu::load_model(model_dir());
  static auto tok = dls::gpu::load_tokenizer(model_dir());
  dls::gpu::engine e(dls::gpu::make_cpu_backend(model));
  auto d = cfg.engine.decode;
  d.gen_length = p.gen_length;
  change(d);
  std::vector<dls::gpu::request_slot> slots;
  slots.push_back(e.admit(dls::gpu::canvas::start(tok->encode(p.prompt), d, model->config.mask_id,
                                                  model->config.eos_id)));
  dls::gpu::decode_all(e, slots, 1);
  return {tok->decode(slots[0].c.answer()), slots[0].c.steps};
}

void expect_serving(const http_cluster& c) {
  auto r = c.call("POST", "/v1/completions", completion(eval_problems(1)[0].prompt));
  BOOST_TEST(r.status == 200, r.body);
}

}  // namespace

BOOST_AUTO_TEST_CASE(health_needs_no_key_and_reports_the_port_in_the_state_dir) {
  auto r = shared().call("GET", "/health", "", false);
  BOOST_TEST(r.status == 200, r.body);
  BOOST_TEST(json::parse(r.body)["status"] == "ok");
}

BOOST_AUTO_TEST_CASE(every_other_route_requires_a_valid_key) {
  const auto& c = shared();
  std::vector<std::pair<std::string, std::string>> routes{{"GET", "/v1/models"},   {"GET", "/v1/cluster"},
                                                          {"GET", "/metrics"},     {"GET", "/v1/models/tiny-llada"},
                                                          {"GET", "/no/such/path"}, {"POST", "/v1/completions"},
                                                          {"POST", "/v1/chat/completions"}};
  for (const auto& [method, path] : routes) {
    auto body = path == "/v1/chat/completions"
                    ? json{{"model", "tiny-llada"}, {"messages", {{{"role", "user"}, {"content", "A1+1="}}}}}.dump()
                : method == "POST" ? completion("A1+1=")
                                   : "";
    auto none = c.call(method, path, body, false);
    BOOST_TEST(none.status == 401, method << " " << path << " without a key: " << none.body);
    BOOST_TEST(error_of(none)["type"] == "authentication_error");
    auto wrong = c.call(method, path, body, false, {"-H", "Authorization: Bearer not-the-key-0123456789"});
    BOOST_TEST(wrong.status == 401, method << " " << path << " with a wrong key: " << wrong.body);
    BOOST_TEST(wrong.body.find("not-the-key") == std::string::npos);  // a key is never echoed
    auto ok = c.call(method, path, body);
    BOOST_TEST(ok.status == (path == "/no/such/path" ? 404 : 200), method << " " << path << ": " << ok.body);
  }
  // The key never reaches the head's log.
  std::ifstream log(c.nodes().state_dir() + "/logs/head.log");
  std::stringstream ss;
  ss << log.rdbuf();
  BOOST_TEST(ss.str().find(api_key()) == std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_requests_get_400_naming_the_field) {
  const auto& c = shared();
  auto malformed = c.call("POST", "/v1/completions", "{\"model\": \"tiny-llada\", ");
  BOOST_TEST(malformed.status == 400);
  BOOST_TEST(error_of(malformed)["param"] == "body");
  std::vector<std::pair<json, std::string>> cases{
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"temperature", 0.7}}, "temperature"},
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"min_threshold", "high"}}, "min_threshold"},
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"extra_body", {{"priority", 2}}}}, "extra_body.priority"},
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"n", 3}}, "n"},
      {{{"model", "tiny-llada"}, {"prompt", 5}}, "prompt"},
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"gen_length", 12}}, "gen_length"},
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"bogus", true}}, "bogus"},
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"top_p", 0}}, "top_p"},
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"top_k", -2}}, "top_k"},
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"extra_body", {{"alg_temp", -1}}}}, "extra_body.alg_temp"},
      // configs/local.yaml commits by threshold, which a position draw cannot serve.
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"alg_temp", 0.5}}, "alg_temp"},
      // and chooses its own count, which Dream's schedule would set.
      {{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"schedule", "dream_linear"}}, "schedule"}};
  for (const auto& [body, field] : cases) {
    auto r = c.call("POST", "/v1/completions", body.dump());
    BOOST_TEST(r.status == 400, body.dump() << ": " << r.body);
    BOOST_TEST(error_of(r)["param"] == field, r.body);
  }
  auto chat = c.call("POST", "/v1/chat/completions", json{{"model", "tiny-llada"}, {"messages", "hi"}}.dump());
  BOOST_TEST(chat.status == 400);
  BOOST_TEST(error_of(chat)["param"] == "messages");
}

BOOST_AUTO_TEST_CASE(unknown_models_and_routes_get_404) {
  const auto& c = shared();
  auto model = c.call("POST", "/v1/completions", json{{"model", "gpt-4"}, {"prompt", "x"}}.dump());
  BOOST_TEST(model.status == 404);
  BOOST_TEST(error_of(model)["code"] == "model_not_found");
  auto route = c.call("GET", "/v2/everything");
  BOOST_TEST(route.status == 404);
  error_of(route);
  BOOST_TEST(c.call("GET", "/v1/models/gpt-4").status == 404);
}

BOOST_AUTO_TEST_CASE(an_over_long_uri_or_header_is_refused_with_a_message_that_names_the_limit) {
  const auto& c = shared();
  auto uri = c.call("GET", "/v1/models?q=" + std::string(10000, 'a'));
  BOOST_TEST(uri.status == 414, uri.body);
  BOOST_TEST(error_of(uri)["message"] == "the request URI exceeds 8192 bytes");
  auto header = c.call("GET", "/v1/models", "", true, {"-H", "X-Long: " + std::string(10000, 'b')});
  BOOST_TEST(header.status == 400, header.body);
  BOOST_TEST(error_of(header)["message"].get<std::string>().find("header line over 8192 bytes") != std::string::npos);
  expect_serving(c);
}

BOOST_AUTO_TEST_CASE(an_over_long_body_gets_413_and_the_cluster_keeps_serving) {
  const auto& c = shared();
  std::string huge(2 << 20, 'a');  // twice configs/local.yaml's max_body_bytes
  auto r = c.call("POST", "/v1/completions", json{{"model", "tiny-llada"}, {"prompt", huge}}.dump());
  BOOST_TEST(r.status == 413, r.body.substr(0, 200));
  BOOST_TEST(error_of(r)["message"].get<std::string>().find("max_body_bytes") != std::string::npos);
  auto long_prompt = c.call("POST", "/v1/completions", completion(std::string(60, 'A')));
  BOOST_TEST(long_prompt.status == 413, long_prompt.body);
  BOOST_TEST(error_of(long_prompt)["code"] == "context_length_exceeded");
  expect_serving(c);
}

BOOST_AUTO_TEST_CASE(a_whole_completion_has_the_openai_envelope_and_the_dlm_extras) {
  auto p = eval_problems(1)[0];
  auto expected = reference_answers("local.yaml", {p})[0];
  auto r = shared().call("POST", "/v1/completions",
                         json{{"model", "tiny-llada"}, {"prompt", p.prompt}, {"gen_length", p.gen_length}, {"slo_ms", 60000}}
                             .dump());
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  auto j = json::parse(r.body);
  BOOST_TEST(j["object"] == "text_completion");
  BOOST_TEST(j["choices"][0]["text"] == expected);
  BOOST_TEST(j["choices"][0]["finish_reason"] == "stop");
  BOOST_TEST(j["usage"]["prompt_tokens"] == p.prompt.size());
  BOOST_TEST(j["usage"]["completion_tokens"] == expected.size());
  BOOST_TEST(j["dilaserve"]["steps"].get<int>() > 0);
  BOOST_TEST(j["dilaserve"]["slo_met"] == true);
  BOOST_TEST(j["dilaserve"]["threshold"] == 0.9);
  BOOST_TEST(!j["dilaserve"]["group"].get<std::string>().empty());
}

BOOST_AUTO_TEST_CASE(a_stream_sends_one_event_per_block_then_done) {
  auto p = eval_problems(1)[0];
  auto expected = reference_answers("local.yaml", {p})[0];
  auto r = shared().call("POST", "/v1/chat/completions",
                         json{{"model", "tiny-llada"},
                              {"messages", {{{"role", "user"}, {"content", p.prompt}}}},
                              {"gen_length", p.gen_length},
                              {"stream", true}}
                             .dump(),
                         true, {"-N"});
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  BOOST_TEST(r.headers.find("text/event-stream") != std::string::npos);
  std::string text;
  int blocks = 0;
  bool done = false, finished = false;
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    auto data = line.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    auto j = json::parse(data);
    BOOST_TEST(j["object"] == "chat.completion.chunk");
    auto& c = j["choices"][0];
    if (!c["finish_reason"].is_null()) {
      finished = true;
      BOOST_TEST(j["dilaserve"]["steps"].get<int>() > 0);
      continue;
    }
    ++blocks;
    text += c["delta"].value("content", "");
  }
  BOOST_TEST(text == expected);
  BOOST_TEST(blocks == static_cast<int>((expected.size() + 7) / 8));
  BOOST_TEST(finished);
  BOOST_TEST(done);
}

BOOST_AUTO_TEST_CASE(metrics_pass_promtool_and_count_what_happened) {
  const auto& c = shared();
  expect_serving(c);
  auto r = c.call("GET", "/metrics");
  BOOST_TEST_REQUIRE(r.status == 200);
  auto file = c.nodes().scratch().file("metrics.txt");
  std::ofstream(file) << r.body;
  std::string out;
  int rc = run_program({"sh", "-c", "promtool check metrics < " + file}, out);
  BOOST_TEST(rc == 0, out);
  for (const char* name :
       {"dilaserve_http_responses_total{code=\"200\",route=\"/v1/completions\"}", "dilaserve_request_duration_seconds_bucket",
        "dilaserve_time_to_first_block_seconds_bucket", "dilaserve_tokens_per_step_bucket", "dilaserve_threshold_bucket",
        "dilaserve_group_queue_depth{group=", "dilaserve_node_up{node=\"node0\"} 1", "dilaserve_requests_total{outcome=\"ok\"}",
        "dilaserve_step_duration_seconds_bucket{kind=\"reuse\",le=\"0.001\"}", "dilaserve_migrations_total 0",
        "dilaserve_reconfigurations_total 0"})
    BOOST_TEST(r.body.find(name) != std::string::npos, name);
  // The answered requests' steps reached the histogram: every request starts with a refresh.
  const std::string refresh_count = "dilaserve_step_duration_seconds_count{kind=\"refresh\"} ";
  const auto at = r.body.find(refresh_count);
  BOOST_TEST_REQUIRE(at != std::string::npos);
  BOOST_TEST(std::stod(r.body.substr(at + refresh_count.size())) >= 1.0, r.body.substr(at, 80));
}

BOOST_AUTO_TEST_CASE(models_and_cluster_routes) {
  auto models = json::parse(shared().call("GET", "/v1/models").body);
  BOOST_TEST(models["data"][0]["id"] == "tiny-llada");
  auto st = shared().status();
  BOOST_TEST(st["cluster"] == "local");
  BOOST_TEST(st["nodes"][0]["state"] == "ALIVE");
}

// A cluster whose node is paused holds requests in flight, which makes the limits and
// a mid-stream disconnect deterministic. Its engine commits one token per step in one block of
// 40, so a request runs 40 steps: a withdrawal read off the wire a few steps late (the node's
// broker and its group run on different threads) still shows as far fewer steps than a run.
BOOST_AUTO_TEST_CASE(over_max_concurrent_gets_429_and_a_disconnect_withdraws_its_request) {
  constexpr int gen = 40;
  http_cluster c({{"max_concurrent", "2"}}, 60000,
                 "engine: {gen_length: 40, block_length: 40, commit: quota, steps_per_block: 40, cache: dual, "
                 "refresh_interval: 4, max_batch: 8}");
  // Denoising steps the cluster's groups ran, as they last reported.
  auto steps = [&] {
    int n = 0;
    auto st = c.status();  // kept alive: the loop walks into it
    for (const auto& g : st["groups"]) n += g.value("steps", 0);
    return n;
  };
  const std::string prompt = "A1+1=..........=";
  auto serve = [&] {
    auto r = c.call("POST", "/v1/completions", completion(prompt, gen), true, {"--max-time", "30"});
    BOOST_TEST(r.status == 200, r.body);
  };
  int before = steps();
  serve();
  BOOST_TEST_REQUIRE(eventually(10, [&] { return steps() > before; }));
  int run = steps() - before;  // the steps of one run of `prompt`, alone
  BOOST_TEST_REQUIRE(run >= gen / 2, "the check below needs a prompt that takes many steps");
  int served = steps();
  int node = c.nodes().pid_of("node0");
  ::kill(node, SIGSTOP);
  // Two streams that cannot finish while the node is paused, held open until killed.
  auto stream_body = json{{"model", "tiny-llada"}, {"prompt", prompt}, {"gen_length", gen}, {"stream", true}}.dump();
  std::ofstream(c.nodes().scratch().file("stream.json")) << stream_body;
  std::vector<int> streams;
  for (int i = 0; i < 2; ++i)
    streams.push_back(start_program({"curl", "-sS", "-N", "--max-time", "60", "-H", "Authorization: Bearer " + api_key(),
                                     "-H", "Content-Type: application/json", "--data-binary",
                                     "@" + c.nodes().scratch().file("stream.json"), c.url("/v1/completions")},
                                    c.nodes().scratch().file("stream-" + std::to_string(i) + ".log")));
  BOOST_TEST_REQUIRE(eventually(20, [&] {
    auto m = c.call("GET", "/metrics").body;
    return m.find("dilaserve_http_requests_in_flight 2") != std::string::npos;
  }));
  auto over = c.call("POST", "/v1/completions", completion("A1+1=", gen), true, {"--max-time", "5"});
  BOOST_TEST(over.status == 429, over.body);
  if (over.status == 429) BOOST_TEST(error_of(over)["type"] == "rate_limit_error");
  for (int pid : streams) kill_program(pid);  // the clients hang up mid-stream
  // Both requests end at the head as withdrawn, though their node is still paused.
  BOOST_TEST(eventually(10, [&] {
    auto st = c.status();
    return st["requests"]["in_flight"] == 0 && st["requests"]["failed"] == 2;
  }));
  ::kill(node, SIGCONT);
  BOOST_TEST(eventually(10, [&] {
    auto m = c.call("GET", "/metrics").body;
    return m.find("dilaserve_http_requests_in_flight 0") != std::string::npos;
  }));
  // The group dropped the withdrawn requests on waking (their admissions were still on
  // the way): run to their end, the two (batched) would have cost `run` steps more. A
  // step may start before the withdrawal is read off the wire, so a few may show.
  serve();
  int after = served;
  BOOST_TEST_REQUIRE(eventually(10, [&] { return (after = steps()) >= served + run; }));
  BOOST_TEST_MESSAGE("steps " << after << " after " << served << ", one run " << run);
  BOOST_TEST(after - served - run < run, "steps " << after << " after " << served << ", one run " << run);
}

BOOST_AUTO_TEST_CASE(no_live_group_gets_503) {
  http_cluster c;
  expect_serving(c);
  ::kill(c.nodes().pid_of("node0"), SIGKILL);
  BOOST_TEST(eventually(15, [&] { return c.status()["groups"].empty(); }));
  auto r = c.call("POST", "/v1/completions", completion("A1+1="));
  BOOST_TEST(r.status == 503, r.body);
  BOOST_TEST(error_of(r)["type"] == "service_unavailable");
  BOOST_TEST(c.call("GET", "/health", "", false).status == 503);
}

BOOST_AUTO_TEST_CASE(a_request_past_its_timeout_gets_504_and_is_withdrawn) {
  http_cluster c({{"request_timeout_s", "2"}}, 60000);
  expect_serving(c);
  int node = c.nodes().pid_of("node0");
  ::kill(node, SIGSTOP);
  auto r = c.call("POST", "/v1/completions", completion("A1+1="), true, {"--max-time", "30"});
  BOOST_TEST(r.status == 504, r.body);
  BOOST_TEST(error_of(r)["type"] == "timeout_error");
  BOOST_TEST(eventually(10, [&] {
    auto st = c.status();
    return st["requests"]["in_flight"] == 0 && st["requests"]["failed"] == 1;
  }));
  ::kill(node, SIGCONT);
  expect_serving(c);
}

BOOST_AUTO_TEST_CASE(the_cluster_limits_are_applied_at_the_gateway_with_413) {
  http_cluster c({}, 0, "limits: {max_prompt_bytes: 8, max_gen_length: 16}");
  auto prompt = c.call("POST", "/v1/completions", completion("A1+1=...."));
  BOOST_TEST(prompt.status == 413, prompt.body);
  BOOST_TEST(error_of(prompt)["param"] == "prompt");
  BOOST_TEST(error_of(prompt)["message"].get<std::string>().find("limits.max_prompt_bytes") != std::string::npos);
  auto gen = c.call("POST", "/v1/completions", completion("A1+1=", 24));
  BOOST_TEST(gen.status == 413, gen.body);
  BOOST_TEST(error_of(gen)["param"] == "gen_length");
  BOOST_TEST(c.call("POST", "/v1/completions", completion("A1+1=")).status == 200);
}

// For each of the first eval problems where the engine decodes otherwise with the request's
// sampler fields than with the cluster's own settings (text or steps), the answer over HTTP must
// be the engine's with them: had the gateway dropped a field, it would be the other decode.
int expect_engine_answers(const http_cluster& c, bool chat, const json& fields,
                          const std::function<void(dls::gpu::decode_params&)>& with,
                          const std::function<void(dls::gpu::decode_params&)>& own) {
  int checked = 0;
  for (auto p : eval_problems(8)) {
    p.gen_length = 16;
    auto want = engine_decode(p, with);
    auto other = engine_decode(p, own);
    if (want.text == other.text && want.steps == other.steps) continue;
    json body{{"model", "tiny-llada"}, {"gen_length", 16}};
    if (chat)
      body["messages"] = {{{"role", "user"}, {"content", p.prompt}}};
    else
      body["prompt"] = p.prompt;
    body.update(fields);
    auto r = c.call("POST", chat ? "/v1/chat/completions" : "/v1/completions", body.dump());
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    auto j = json::parse(r.body);
    BOOST_TEST((chat ? j["choices"][0]["message"]["content"] : j["choices"][0]["text"]) == want.text, p.prompt);
    BOOST_TEST(j["dilaserve"]["steps"] == want.steps, p.prompt);
    ++checked;
  }
  return checked;
}

BOOST_AUTO_TEST_CASE(per_request_top_p_and_top_k_reach_the_canvas) {
  // top_k 1 leaves one candidate per position: every confidence is 1 and τ 0.9 commits a whole
  // block per step. A nucleus of 0.3 renormalises the confidences, so τ commits otherwise.
  const auto& c = shared();
  auto own = [](dls::gpu::decode_params&) {};
  BOOST_TEST(expect_engine_answers(c, false, {{"top_k", 1}}, [](auto& d) { d.top_k = 1; }, own) > 0,
             "top_k 1 changed none of 8 decodes");
  BOOST_TEST(expect_engine_answers(c, true, {{"top_p", 0.3}}, [](auto& d) { d.top_p = 0.3; }, own) > 0,
             "top_p 0.3 changed none of 8 decodes");
  BOOST_TEST(expect_engine_answers(c, false, {{"extra_body", {{"top_k", 2}}}, {"top_p", 0.5}},
                                   [](auto& d) {
                                     d.top_k = 2;
                                     d.top_p = 0.5;
                                   },
                                   own) > 0,
             "top_p 0.5 with top_k 2 changed none of 8 decodes");
}

BOOST_AUTO_TEST_CASE(a_requests_commit_rule_and_steps_reach_the_canvas_over_http_and_submit) {
  // configs/local.yaml commits by threshold; a request's own rule and steps per block must decode
  // as the engine does with them. (On the tiny model margin and entropy rank as quota does: their
  // decodes equal quota's on the first 80 eval prompts, so these cases compare against the
  // cluster's threshold decode, and origin, whose draws differ, against quota.)
  const auto& c = shared();
  using dls::common::commit_rule;
  auto rule = [](commit_rule r, int steps) {
    return [r, steps](dls::gpu::decode_params& d) {
      d.rule = r;
      d.steps_per_block = steps;
    };
  };
  auto own = [](dls::gpu::decode_params&) {};
  BOOST_TEST(expect_engine_answers(c, false, {{"commit", "quota"}, {"steps_per_block", 4}}, rule(commit_rule::quota, 4),
                                   own) > 0,
             "commit quota changed none of 8 decodes");
  BOOST_TEST(expect_engine_answers(c, true, {{"extra_body", {{"alg", "topk_margin"}}}}, rule(commit_rule::margin, 0),
                                   own) > 0,
             "alg topk_margin changed none of 8 chat decodes");
  BOOST_TEST(expect_engine_answers(c, false, {{"alg", "origin"}, {"extra_body", {{"steps", 4}}}},
                                   rule(commit_rule::origin, 4), rule(commit_rule::quota, 4)) > 0,
             "alg origin decoded as quota on all 8");
  // The rule is read before the fields that depend on it are checked: alg_temp comes first in
  // the body and is accepted with the request's quota, refused with the cluster's threshold.
  auto drawn = c.call("POST", "/v1/completions",
                      json{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"alg_temp", 1}, {"commit", "quota"}}.dump());
  BOOST_TEST(drawn.status == 200, drawn.body);
  auto refused = c.call("POST", "/v1/completions",
                        json{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"steps_per_block", 4}}.dump());
  BOOST_TEST(refused.status == 400);
  BOOST_TEST(error_of(refused)["param"] == "steps_per_block");

  // `dilaserve submit --rule --steps-per-block` and the same keys in a --file line.
  scratch_dir dir;
  std::ofstream lines(dir.file("rules.jsonl"));
  std::vector<decoded> want;
  int differ = 0;
  for (auto p : eval_problems(4)) {
    p.gen_length = 16;
    const auto quota = engine_decode(p, rule(commit_rule::quota, 4));
    const auto plain = engine_decode(p, own);
    differ += quota.text != plain.text || quota.steps != plain.steps;
    auto one = c.nodes().json_cli(
        {"submit", "--prompt", p.prompt, "--gen-length", "16", "--rule", "quota", "--steps-per-block", "4"});
    BOOST_TEST(one["text"] == quota.text, p.prompt);
    BOOST_TEST(one["steps"] == quota.steps, p.prompt);
    want.push_back(engine_decode(p, rule(commit_rule::origin, 2)));
    lines << json{{"prompt", p.prompt}, {"gen_length", 16}, {"commit", "origin"}, {"steps_per_block", 2}}.dump() << "\n";
  }
  lines.close();
  BOOST_TEST(differ > 0, "quota with 4 steps a block decoded none of 4 otherwise than threshold");
  auto file = c.nodes().json_cli({"submit", "--file", dir.file("rules.jsonl")});
  BOOST_TEST_REQUIRE(file["results"].size() == want.size(), file.dump());
  for (std::size_t i = 0; i < want.size(); ++i) {
    BOOST_TEST(file["results"][i]["text"] == want[i].text);
    BOOST_TEST(file["results"][i]["steps"] == want[i].steps);
  }
  // The head checks the request's settings with the cluster's before placing it: alg_temp under
  // the cluster's threshold rule is refused there in one line; with --rule quota it decodes.
  auto head = c.nodes().cli({"submit", "--prompt", "A1+1=", "--alg-temp", "1"});
  BOOST_TEST(head.rc == 1, head.err);
  BOOST_TEST(head.err.find("refused by the head: alg_temp samples the positions") != std::string::npos, head.err);
  BOOST_TEST(c.nodes().json_cli({"submit", "--prompt", "A1+1=", "--alg-temp", "1", "--rule", "quota"})["ok"] == true);
}

BOOST_AUTO_TEST_CASE(dream_schedule_and_sampler_options_reach_the_canvas_over_http_and_submit) {
  // 12 steps per block of 8: the even split commits one a step and ends a block in 8 steps,
  // Dream's schedule commits none on some steps and takes all 12 (and the tiny model's answers
  // barely depend on the order, so the step counts are what tells the two apart).
  http_cluster c({}, 0,
                 "engine: {gen_length: 16, block_length: 8, commit: quota, steps_per_block: 12, cache: dual, "
                 "refresh_interval: 4, max_batch: 8}");
  auto quota4 = [](dls::common::step_schedule s, std::function<void(dls::gpu::decode_params&)> more = {}) {
    return [s, more](dls::gpu::decode_params& d) {
      d.rule = dls::common::commit_rule::quota;
      d.steps_per_block = 12;
      d.schedule = s;
      if (more) more(d);
    };
  };
  const auto even = quota4(dls::common::step_schedule::even);
  const auto linear = quota4(dls::common::step_schedule::dream_linear);
  BOOST_TEST(expect_engine_answers(c, false, {{"schedule", "dream_linear"}}, linear, even) > 0,
             "schedule dream_linear changed none of 8 decodes");
  BOOST_TEST(expect_engine_answers(c, true, {{"extra_body", {{"schedule", "dream_linear"}}}}, linear, even) > 0,
             "schedule dream_linear changed none of 8 chat decodes");
  auto refused = c.call("POST", "/v1/completions",
                        json{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"schedule", "linear"}}.dump());
  BOOST_TEST(refused.status == 400);
  BOOST_TEST(error_of(refused)["param"] == "schedule");

  // `dilaserve submit` carries the same options, as flags and per line of --file, and the
  // answers are the engine's own decodes with those settings. Each flag alone must change some
  // decode (else its test could not fail), then all four together go through a --file.
  struct option {
    std::vector<std::string> flags;
    json fields;
    std::function<void(dls::gpu::decode_params&)> set;
  };
  const std::vector<option> options{
      {{"--schedule", "dream_linear"}, {{"schedule", "dream_linear"}},
       [](auto& d) { d.schedule = dls::common::step_schedule::dream_linear; }},
      {{"--top-k", "1"}, {{"top_k", 1}}, [](auto& d) { d.top_k = 1; }},
      {{"--top-p", "0.3"}, {{"top_p", 0.3}}, [](auto& d) { d.top_p = 0.3; }},
      {{"--alg-temp", "1"}, {{"alg_temp", 1.0}}, [](auto& d) { d.alg_temp = 1.0; }}};
  const auto problems = eval_problems(6);
  auto submit_matches = [&](const option& o) {
    int differ = 0;
    for (auto p : problems) {
      p.gen_length = 16;
      const auto want = engine_decode(p, quota4(dls::common::step_schedule::even, o.set));
      const auto plain = engine_decode(p, even);
      if (want.text == plain.text && want.steps == plain.steps) continue;
      ++differ;
      std::vector<std::string> args{"submit", "--prompt", p.prompt, "--gen-length", "16"};
      args.insert(args.end(), o.flags.begin(), o.flags.end());
      auto one = c.nodes().json_cli(args);
      BOOST_TEST(one["ok"] == true, one.dump());
      BOOST_TEST(one["text"] == want.text, o.flags[0] << " " << p.prompt);
      BOOST_TEST(one["steps"] == want.steps, o.flags[0] << " " << p.prompt);
    }
    return differ;
  };
  for (const auto& o : options) BOOST_TEST(submit_matches(o) > 0, o.flags[0] << " changed none of 6 decodes");

  scratch_dir dir;
  std::ofstream lines(dir.file("dream.jsonl"));
  std::vector<decoded> want;
  const auto all = [&](dls::gpu::decode_params& d) {
    for (const auto& o : options) o.set(d);
  };
  for (auto p : problems) {
    p.gen_length = 16;
    want.push_back(engine_decode(p, quota4(dls::common::step_schedule::even, all)));
    json line{{"prompt", p.prompt}, {"gen_length", 16}};
    for (const auto& o : options) line.update(o.fields);
    lines << line.dump() << "\n";
  }
  lines.close();
  auto file = c.nodes().json_cli({"submit", "--file", dir.file("dream.jsonl")});
  BOOST_TEST_REQUIRE(file["results"].size() == problems.size(), file.dump());
  for (std::size_t i = 0; i < problems.size(); ++i) {
    BOOST_TEST(file["results"][i]["text"] == want[i].text, problems[i].prompt);
    BOOST_TEST(file["results"][i]["steps"] == want[i].steps, problems[i].prompt);
  }
}

BOOST_AUTO_TEST_CASE(the_cluster_files_dream_settings_reach_its_nodes) {
  // The nodes get the engine defaults in the head's join reply: schedule, top_k and alg_temp from
  // the cluster file must decode there as the engine decodes with them.
  http_cluster c({}, 0,
                 "engine: {gen_length: 16, block_length: 8, commit: quota, steps_per_block: 12, "
                 "schedule: dream_linear, top_k: 2, alg_temp: 1, cache: dual, refresh_interval: 4, max_batch: 8}");
  auto with = [](dls::gpu::decode_params& d) {
    d.rule = dls::common::commit_rule::quota;
    d.steps_per_block = 12;
    d.schedule = dls::common::step_schedule::dream_linear;
    d.top_k = 2;
    d.alg_temp = 1;
  };
  int differ = 0;
  for (auto p : eval_problems(8)) {
    p.gen_length = 16;
    const auto want = engine_decode(p, with);
    for (auto drop : std::vector<std::function<void(dls::gpu::decode_params&)>>{
             [](auto& d) { d.schedule = dls::common::step_schedule::even; }, [](auto& d) { d.top_k = 0; },
             [](auto& d) { d.alg_temp = 0; }}) {
      const auto without = engine_decode(p, [&](auto& d) {
        with(d);
        drop(d);
      });
      differ += without.text != want.text || without.steps != want.steps;
    }
    auto r = c.call("POST", "/v1/completions", completion(p.prompt));
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    auto j = json::parse(r.body);
    BOOST_TEST(j["choices"][0]["text"] == want.text, p.prompt);
    BOOST_TEST(j["dilaserve"]["steps"] == want.steps, p.prompt);
  }
  BOOST_TEST(differ > 0, "dropping any of the three settings changed none of 8 decodes");
}

BOOST_AUTO_TEST_CASE(an_origin_cluster_decodes_as_the_engine_does) {
  // Each mask is committed with Dream's probability 1 - s/t, drawn from the cluster's seed.
  http_cluster c({}, 0,
                 "engine: {gen_length: 16, block_length: 8, commit: origin, steps_per_block: 4, seed: 9, "
                 "cache: dual, refresh_interval: 4, max_batch: 8}");
  auto origin = [](uint64_t seed) {
    return [seed](dls::gpu::decode_params& d) {
      d.rule = dls::common::commit_rule::origin;
      d.steps_per_block = 4;
      d.seed = seed;
    };
  };
  BOOST_TEST(expect_engine_answers(c, false, json::object(), origin(9), origin(10)) > 0,
             "seeds 9 and 10 drew the same 8 decodes");
  // eps moves origin's timesteps, so each step's 1 - s/t: over HTTP and from `submit --eps`.
  auto origin_eps = [&](double eps) {
    return [eps, o = origin(9)](dls::gpu::decode_params& d) {
      o(d);
      d.eps = eps;
    };
  };
  BOOST_TEST(expect_engine_answers(c, false, {{"eps", 0.6}}, origin_eps(0.6), origin(9)) > 0,
             "eps 0.6 changed none of 8 decodes");
  for (auto p : eval_problems(2)) {
    p.gen_length = 16;
    const auto want = engine_decode(p, origin_eps(0.6));
    auto one = c.nodes().json_cli({"submit", "--prompt", p.prompt, "--gen-length", "16", "--eps", "0.6"});
    BOOST_TEST(one["ok"] == true, one.dump());
    BOOST_TEST(one["text"] == want.text, p.prompt);
    BOOST_TEST(one["steps"] == want.steps, p.prompt);
  }
  for (json bad : {json(1.0), json(-0.5), json("0.1")}) {
    auto r = c.call("POST", "/v1/completions", json{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"eps", bad}}.dump());
    BOOST_TEST(r.status == 400, bad.dump());
    BOOST_TEST(error_of(r)["param"] == "eps");
  }
  auto refused = c.call("POST", "/v1/completions",
                        json{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"alg_temp", 0.5}}.dump());
  BOOST_TEST(refused.status == 400);
  BOOST_TEST(error_of(refused)["param"] == "alg_temp");
}

BOOST_AUTO_TEST_CASE(per_request_alg_temp_draws_the_positions_as_the_engine_does) {
  // A cluster that commits one position per step (quota), where alg_temp may draw it.
  http_cluster c({}, 0,
                 "engine: {gen_length: 16, block_length: 8, commit: quota, cache: dual, refresh_interval: 4, "
                 "max_batch: 8}");
  auto quota = [](double alg_temp) {
    return [alg_temp](dls::gpu::decode_params& d) {
      d.rule = dls::common::commit_rule::quota;
      d.alg_temp = alg_temp;
    };
  };
  BOOST_TEST(expect_engine_answers(c, false, {{"extra_body", {{"alg_temp", 1.0}}}}, quota(1.0), quota(0)) > 0,
             "alg_temp 1 changed none of 8 decodes");
  auto refused = c.call("POST", "/v1/completions", json{{"model", "tiny-llada"}, {"prompt", "A1+1="}, {"alg_temp", -1}}.dump());
  BOOST_TEST(refused.status == 400);
  BOOST_TEST(error_of(refused)["param"] == "alg_temp");
}
