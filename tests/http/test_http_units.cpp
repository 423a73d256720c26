// The gateway's pure parts: request mapping (every field honoured or refused by name),
// stop sequences and max_tokens over block-by-block text, keys, the error shape.
#define BOOST_TEST_MODULE http_units
#include "gateway/accept_queue.hpp"
#include "gateway/answer_error.hpp"
#include "gateway/api_error.hpp"
#include "gateway/api_keys.hpp"
#include "gateway/openai_request.hpp"
#include "gateway/output_filter.hpp"
#include "gateway/recent_window.hpp"

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace dls::gateway;
using json = nlohmann::json;

namespace {

model_facts facts() {
  model_facts f;
  f.id = "tiny-llada";
  f.max_seq = 64;
  f.engine.block_length = 8;
  f.engine.gen_length = 16;
  return f;
}

// The status and the field a refused body names.
std::pair<int, std::string> refusal(const json& body, bool chat = false) {
  try {
    parse_completion(body.dump(), chat, facts());
  } catch (const api_error& e) {
    return {e.status(), e.param()};
  }
  return {0, ""};
}

// The field and the one-line message of a body `f`'s cluster refuses; empty when it is accepted.
std::pair<std::string, std::string> refused_field(const json& body, const model_facts& f) {
  try {
    parse_completion(body.dump(), false, f);
  } catch (const api_error& e) {
    BOOST_TEST(e.status() == 400);
    auto m = json::parse(e.body())["error"]["message"].get<std::string>();
    BOOST_TEST(m.find('\n') == std::string::npos, m);
    return {e.param(), m};
  }
  return {"", ""};
}

model_facts facts_with(dls::common::commit_rule rule) {
  auto f = facts();
  f.engine.rule = rule;
  return f;
}

output_filter chars(std::vector<std::string> stop, int max_tokens) {
  return output_filter(
      std::move(stop), max_tokens, [](const std::string& s) { return s.size(); },
      [](const std::string& s, std::size_t n) { return s.substr(0, n); });
}

}  // namespace

BOOST_AUTO_TEST_CASE(completion_fields_map_onto_the_runtime) {
  auto r = parse_completion(R"({"model":"tiny-llada","prompt":"A1+2=","max_tokens":5,"threshold":0.7,
                               "slo_ms":250,"stream":true,"stop":["x"],"temperature":0,"seed":7,"n":1})",
                            false, facts());
  BOOST_TEST(r.prompt == "A1+2=");
  BOOST_TEST(r.max_tokens == 5);
  BOOST_TEST(r.gen_length == 8);  // rounded up to whole blocks
  BOOST_TEST(r.threshold == 0.7);
  BOOST_TEST(r.slo_ms == 250);
  BOOST_TEST(r.stream);
  BOOST_TEST(r.stop == std::vector<std::string>{"x"});
  auto d = parse_completion(R"({"model":"tiny-llada","prompt":"p"})", false, facts());
  BOOST_TEST(d.gen_length == 16);
  BOOST_TEST(d.threshold < 0);
}

BOOST_AUTO_TEST_CASE(a_number_out_of_range_is_refused_with_its_bounds_as_written) {
  const json base = {{"model", "tiny-llada"}, {"prompt", "p"}};
  auto with = [&](const char* key, const json& v) {
    auto b = base;
    b[key] = v;
    return b;
  };
  BOOST_TEST(refused_field(with("temperature", -1), facts()).second == "temperature: must be in [0, 2]");
  BOOST_TEST(refused_field(with("threshold", 2), facts()).second == "threshold: must be in [0, 1]");
  BOOST_TEST(refused_field(with("slo_ms", 1e308), facts()).second == "slo_ms: must be in [1, 86400000]");
  BOOST_TEST(refused_field(with("max_tokens", 100000000), facts()).second == "max_tokens: must be in [1, 64]");
}

BOOST_AUTO_TEST_CASE(dlm_extras_are_read_at_the_top_level_and_under_extra_body) {
  auto r = parse_completion(R"({"model":"tiny-llada","prompt":"p","extra_body":{"gen_length":48,"deadline_ms":90}})",
                            false, facts());
  BOOST_TEST(r.gen_length == 48);
  BOOST_TEST(r.slo_ms == 90);
  auto both = refusal({{"model", "tiny-llada"}, {"prompt", "p"}, {"gen_length", 8}, {"extra_body", {{"gen_length", 8}}}});
  BOOST_TEST(both.first == 400);
  BOOST_TEST(both.second == "extra_body.gen_length");
}

BOOST_AUTO_TEST_CASE(dream_sampler_options_are_per_request_within_decode_settings_ranges) {
  auto r = parse_completion(R"({"model":"tiny-llada","prompt":"p","top_p":0.8,"top_k":3})", false, facts());
  BOOST_TEST(r.top_p == 0.8);
  BOOST_TEST(r.top_k == 3);
  BOOST_TEST(r.alg_temp == -1);  // the cluster's engine.alg_temp
  auto d = parse_completion(R"({"model":"tiny-llada","prompt":"p"})", false, facts());
  BOOST_TEST(d.top_p == -1);
  BOOST_TEST(d.top_k == -1);
  // 0 is a setting, not the default: no top-k truncation, positions by the highest scores.
  auto zero = parse_completion(R"({"model":"tiny-llada","prompt":"p","top_k":0,"alg_temp":0,"top_p":1})", false,
                               facts());
  BOOST_TEST(zero.top_k == 0);
  BOOST_TEST(zero.alg_temp == 0);
  BOOST_TEST(zero.top_p == 1);
  auto chat = parse_completion(
      R"({"model":"tiny-llada","messages":[{"role":"user","content":"x"}],"extra_body":{"top_k":2,"alg_temp":0}})",
      true, facts());
  BOOST_TEST(chat.top_k == 2);

  json base{{"model", "tiny-llada"}, {"prompt", "p"}};
  auto message = [&](const std::string& k, json v, const model_facts& f) -> std::pair<std::string, std::string> {
    auto b = base;
    b[k] = v;
    try {
      parse_completion(b.dump(), false, f);
    } catch (const api_error& e) {
      BOOST_TEST(e.status() == 400);
      auto m = json::parse(e.body())["error"]["message"].get<std::string>();
      BOOST_TEST(m.find('\n') == std::string::npos);
      return {e.param(), m};
    }
    return {"", ""};
  };
  for (json bad : {json(0), json(-0.1), json(1.5), json("0.5"), json(true)})
    BOOST_TEST(message("top_p", bad, facts()).first == "top_p", bad.dump());
  for (json bad : {json(-1), json(2.5), json("3"), json(3000000000.0)})
    BOOST_TEST(message("top_k", bad, facts()).first == "top_k", bad.dump());
  for (json bad : {json(-0.5), json("1"), json::array({1})})
    BOOST_TEST(message("alg_temp", bad, facts()).first == "alg_temp", bad.dump());
  auto quota_facts = facts();
  quota_facts.engine.rule = dls::common::commit_rule::quota;
  for (json bad : {json(-0.1), json(1.0), json(7), json("0.5")})
    BOOST_TEST(message("eps", bad, quota_facts).first == "eps", bad.dump());
  // eps only moves dream_linear's and origin's timesteps: under threshold (facts()'s rule) it would do nothing.
  BOOST_TEST(message("eps", 0.5, facts()).second.find("threshold (engine.commit)") != std::string::npos);
  // Under quota with the schedule even it would do nothing either: refused with decode_settings'
  // reason, with the request's own dream_linear taken.
  BOOST_TEST(message("eps", 0.5, quota_facts).second.find("with the quota rule and schedule even it would change "
                                                          "nothing") != std::string::npos);
  auto dream_linear = quota_facts;
  dream_linear.engine.schedule = dls::common::step_schedule::dream_linear;
  BOOST_TEST(message("eps", 0.5, dream_linear).first == "");
  {
    auto b = base;
    b["eps"] = 0.0;
    b["schedule"] = "dream_linear";
    BOOST_TEST(parse_completion(b.dump(), false, quota_facts).eps == 0.0);
    BOOST_TEST(parse_completion(base.dump(), false, quota_facts).eps == -1);  // the cluster's engine.eps
  }
  BOOST_TEST(message("top_p", 0, facts()).second == "top_p: must be a number in (0, 1] (1: no nucleus truncation)");

  // alg_temp draws a fixed number of positions: refused under the threshold rule (facts()'s
  // default, as the cluster's engine.commit) with what decode_settings would say, accepted under
  // the quota, margin and entropy rules.
  auto threshold = message("alg_temp", 0.5, facts());
  BOOST_TEST(threshold.first == "alg_temp");
  BOOST_TEST(threshold.second.find("needs the quota, margin or entropy rule") != std::string::npos, threshold.second);
  BOOST_TEST(threshold.second.find("threshold (engine.commit)") != std::string::npos, threshold.second);
  auto factor = facts();
  factor.engine.rule = dls::common::commit_rule::factor;
  BOOST_TEST(message("alg_temp", 0.5, factor).first == "alg_temp");
  BOOST_TEST(message("alg_temp", 0, factor).first == "");  // 0 is off under any rule
  for (auto rule : {dls::common::commit_rule::quota, dls::common::commit_rule::margin,
                    dls::common::commit_rule::entropy}) {
    auto f = facts();
    f.engine.rule = rule;
    auto b = base;
    b["alg_temp"] = 0.5;
    BOOST_TEST(parse_completion(b.dump(), false, f).alg_temp == 0.5);
    b.erase("alg_temp");
    b["extra_body"] = {{"alg_temp", 2}};
    BOOST_TEST(parse_completion(b.dump(), false, f).alg_temp == 2);
  }
  auto twice = base;
  twice["top_k"] = 2;
  twice["extra_body"] = {{"top_k", 2}};
  BOOST_TEST(refusal(twice).second == "extra_body.top_k");

  // Dream's schedule: a name, and dream_linear only under a rule that commits a counted number
  // (or origin, whose probabilities are Dream's anyway), as decode_settings::validate has it.
  for (json bad : {json("linear"), json(1), json(true), json::array({"even"})})
    BOOST_TEST(message("schedule", bad, facts()).first == "schedule", bad.dump());
  BOOST_TEST(message("schedule", "Even", facts()).second == "schedule: must be \"even\" or \"dream_linear\"");
  auto under_threshold = message("schedule", "dream_linear", facts());
  BOOST_TEST(under_threshold.first == "schedule");
  BOOST_TEST(under_threshold.second.find("the cluster decodes with threshold (engine.commit)") != std::string::npos,
             under_threshold.second);
  BOOST_TEST(parse_completion(base.dump(), false, facts()).schedule == -1);
  {
    auto b = base;
    b["schedule"] = "even";
    BOOST_TEST(parse_completion(b.dump(), false, facts()).schedule == 0);
  }
  for (auto rule : {dls::common::commit_rule::quota, dls::common::commit_rule::margin,
                    dls::common::commit_rule::entropy, dls::common::commit_rule::origin}) {
    auto f = facts();
    f.engine.rule = rule;
    auto b = base;
    b["extra_body"] = {{"schedule", "dream_linear"}};
    BOOST_TEST(parse_completion(b.dump(), false, f).schedule == 1);
  }

  // A cluster with CUDA nodes cannot truncate: top_p < 1 and top_k > 0 are refused up front.
  auto cuda = facts();
  cuda.truncates = false;
  BOOST_TEST(message("top_p", 0.9, cuda).first == "top_p");
  BOOST_TEST(message("top_k", 4, cuda).first == "top_k");
  BOOST_TEST(message("top_p", 1, cuda).first == "");
  BOOST_TEST(message("top_k", 0, cuda).first == "");
}

BOOST_AUTO_TEST_CASE(the_commit_rule_and_its_steps_are_per_request_and_checked_once_every_field_is_read) {
  using dls::common::commit_rule;
  const json base{{"model", "tiny-llada"}, {"prompt", "p"}};
  auto with = [&](const json& fields) {
    auto b = base;
    b.update(fields);
    return b;
  };
  auto parsed = [&](const json& fields, const model_facts& f) { return parse_completion(with(fields).dump(), false, f); };
  // Our names under `commit`, Dream's under `alg`; steps per block as `steps_per_block` or Dream's `steps`.
  auto quota = parsed({{"commit", "quota"}, {"steps_per_block", 4}}, facts());
  BOOST_TEST(quota.rule == static_cast<int>(commit_rule::quota));
  BOOST_TEST(quota.steps_per_block == 4);
  auto plain = parsed(json::object(), facts());
  BOOST_TEST(plain.rule == -1);  // the cluster's engine.commit
  BOOST_TEST(plain.steps_per_block == -1);
  for (const char* name : {"quota", "threshold", "factor", "margin", "entropy", "origin"})
    BOOST_TEST(parsed({{"extra_body", {{"commit", name}}}}, facts()).rule ==
                   static_cast<int>(dls::common::parse_commit_rule(name)),
               name);
  const std::vector<std::pair<std::string, commit_rule>> dream{{"maskgit_plus", commit_rule::quota},
                                                               {"topk_margin", commit_rule::margin},
                                                               {"entropy", commit_rule::entropy},
                                                               {"origin", commit_rule::origin}};
  for (const auto& [alg, rule] : dream) {
    auto r = parsed({{"alg", alg}, {"extra_body", {{"steps", 6}}}}, facts());
    BOOST_TEST(r.rule == static_cast<int>(rule), alg);
    BOOST_TEST(r.steps_per_block == 6, alg);
  }
  BOOST_TEST(parsed({{"commit", "origin"}, {"steps_per_block", 0}}, facts()).steps_per_block == 0);  // the block length

  // Bad values, our names under Dream's field and one setting given twice: refused by name.
  const std::vector<std::pair<json, std::string>> bad{
      {{{"commit", "bogus"}}, "commit"},
      {{{"commit", 3}}, "commit"},
      {{{"alg", "quota"}}, "alg"},
      {{{"extra_body", {{"alg", "maskgit"}}}}, "extra_body.alg"},
      {{{"commit", "quota"}, {"steps_per_block", -1}}, "steps_per_block"},
      {{{"commit", "quota"}, {"steps_per_block", 8193}}, "steps_per_block"},
      {{{"commit", "quota"}, {"steps", 2.5}}, "steps"},
      {{{"alg", "origin"}, {"extra_body", {{"commit", "quota"}}}}, "extra_body.commit"},
      {{{"commit", "quota"}, {"steps", 4}, {"extra_body", {{"steps_per_block", 4}}}}, "extra_body.steps_per_block"}};
  for (const auto& [fields, field] : bad) BOOST_TEST(refused_field(with(fields), facts()).first == field, fields.dump());
  BOOST_TEST(refused_field(with({{"commit", "Quota"}}), facts()).second ==
             "commit: must be one of \"quota\", \"threshold\", \"factor\", \"margin\", \"entropy\", \"origin\"");

  // The rule-dependent options are checked against the request's rule, whatever the order of
  // the fields: alg_temp comes before commit in a JSON object read in key order, and also when
  // the rule sits under extra_body.
  BOOST_TEST(parsed({{"alg_temp", 1}, {"commit", "quota"}}, facts()).alg_temp == 1);
  BOOST_TEST(parsed({{"alg_temp", 1}, {"extra_body", {{"commit", "quota"}}}}, facts()).alg_temp == 1);
  BOOST_TEST(parsed({{"commit", "entropy"}, {"extra_body", {{"alg_temp", 1}}}}, facts()).alg_temp == 1);
  auto alone = refused_field(with({{"alg_temp", 1}}), facts());
  BOOST_TEST(alone.first == "alg_temp");
  BOOST_TEST(alone.second.find("the cluster decodes with threshold (engine.commit)") != std::string::npos, alone.second);
  auto own = refused_field(with({{"alg_temp", 1}, {"extra_body", {{"commit", "threshold"}}}}), facts_with(commit_rule::quota));
  BOOST_TEST(own.first == "alg_temp");
  BOOST_TEST(own.second.find("the request decodes with threshold (extra_body.commit)") != std::string::npos, own.second);
  BOOST_TEST(parsed({{"schedule", "dream_linear"}, {"alg", "topk_margin"}}, facts()).schedule == 1);
  BOOST_TEST(refused_field(with({{"schedule", "dream_linear"}, {"commit", "factor"}}), facts_with(commit_rule::quota)).first ==
             "schedule");
  BOOST_TEST(parsed({{"eps", 0.5}, {"commit", "origin"}}, facts()).eps == 0.5);
  BOOST_TEST(refused_field(with({{"eps", 0.5}, {"commit", "threshold"}}), facts_with(commit_rule::origin)).first == "eps");
  // Steps per block change nothing under threshold or factor.
  BOOST_TEST(refused_field(with({{"steps_per_block", 4}}), facts()).first == "steps_per_block");
  auto steps = refused_field(with({{"steps", 4}, {"commit", "factor"}}), facts_with(commit_rule::quota));
  BOOST_TEST(steps.first == "steps");
  BOOST_TEST(steps.second.find("the request decodes with factor (commit)") != std::string::npos, steps.second);
  BOOST_TEST(parsed({{"steps", 4}}, facts_with(commit_rule::origin)).steps_per_block == 4);

  // The request's settings with the cluster's: a cluster drawing positions (engine.alg_temp)
  // cannot decode a request's threshold rule, and one whose eps only dream_linear uses cannot
  // decode a request's even schedule; each names what the request gave.
  auto drawing = facts_with(commit_rule::quota);
  drawing.engine.alg_temp = 1;
  auto threshold = refused_field(with({{"commit", "threshold"}}), drawing);
  BOOST_TEST(threshold.first == "commit");
  BOOST_TEST(threshold.second.find("alg_temp") != std::string::npos, threshold.second);
  BOOST_TEST(parsed({{"commit", "margin"}}, drawing).rule == static_cast<int>(commit_rule::margin));
  auto linear = facts_with(commit_rule::quota);
  linear.engine.schedule = dls::common::step_schedule::dream_linear;
  linear.engine.eps = 0.5;
  BOOST_TEST(refused_field(with({{"extra_body", {{"schedule", "even"}}}}), linear).first == "extra_body.schedule");
  BOOST_TEST(refused_field(with({{"commit", "factor"}}), linear).first == "commit");
  BOOST_TEST(parsed({{"commit", "origin"}}, linear).rule == static_cast<int>(commit_rule::origin));

  // A cluster with CUDA nodes cannot rank by margin or entropy.
  auto cuda = facts();
  cuda.scores = false;
  BOOST_TEST(refused_field(with({{"alg", "topk_margin"}}), cuda).first == "alg");
  BOOST_TEST(refused_field(with({{"extra_body", {{"commit", "entropy"}}}}), cuda).first == "extra_body.commit");
  BOOST_TEST(parsed({{"alg", "maskgit_plus"}}, cuda).rule == static_cast<int>(commit_rule::quota));
}

BOOST_AUTO_TEST_CASE(chat_takes_the_last_user_message_as_the_prompt) {
  auto r = parse_completion(
      R"({"model":"tiny-llada","messages":[{"role":"system","content":"be brief"},
          {"role":"user","content":[{"type":"text","text":"A1"},{"type":"text","text":"+2="}]}]})",
      true, facts());
  BOOST_TEST(r.prompt == "A1+2=");
  BOOST_TEST(refusal({{"model", "tiny-llada"}, {"messages", {{{"role", "assistant"}, {"content", "x"}}}}}, true).second ==
             "messages");
  BOOST_TEST(refusal({{"model", "tiny-llada"}, {"messages", {{{"role", "tool"}, {"content", "x"}}}}}, true).second ==
             "messages[0].role");
}

BOOST_AUTO_TEST_CASE(what_the_runtime_cannot_honour_is_refused_by_name) {
  json base{{"model", "tiny-llada"}, {"prompt", "p"}};
  auto with = [&](const std::string& k, json v) {
    auto b = base;
    b[k] = v;
    return refusal(b);
  };
  BOOST_TEST(with("min_threshold", 1.5).second == "min_threshold");
  BOOST_TEST(with("min_threshold", 0.5).first == 0);  // a quality floor the scheduler keeps
  BOOST_TEST(with("on_miss", "drop").second == "on_miss");
  BOOST_TEST(with("on_miss", 1).second == "on_miss");
  BOOST_TEST(with("on_miss", "reject").first == 0);  // a strict SLO (refused at once if unreachable)
  {
    auto b = base;
    b["on_miss"] = "reject";
    BOOST_TEST(parse_completion(b.dump(), false, facts()).reject_on_miss);
    BOOST_TEST(!parse_completion(base.dump(), false, facts()).reject_on_miss);
  }
  BOOST_TEST(with("priority", 3).second == "priority");
  BOOST_TEST(with("block_length", 4).second == "block_length");
  BOOST_TEST(with("temperature", 0.8).second == "temperature");
  BOOST_TEST(with("n", 2).second == "n");
  BOOST_TEST(with("logprobs", 3).second == "logprobs");
  BOOST_TEST(with("frobnicate", 1).second == "frobnicate");
  BOOST_TEST(with("gen_length", 12).second == "gen_length");  // not whole blocks
  BOOST_TEST(with("threshold", 1.5).second == "threshold");
  BOOST_TEST(with("max_tokens", "ten").second == "max_tokens");
  BOOST_TEST(with("stop", json::array({"a", "b", "c", "d", "e"})).second == "stop");
  BOOST_TEST(with("priority", 0).first == 0);  // the neutral value is honoured
  BOOST_TEST(with("block_length", 8).first == 0);
  BOOST_TEST(refusal({{"model", "gpt-4"}, {"prompt", "p"}}).first == 404);
  BOOST_TEST(refusal({{"prompt", "p"}}).second == "model");
  BOOST_TEST(refusal({{"model", "tiny-llada"}}).second == "prompt");
  try {
    parse_completion("{\"model\": ", false, facts());
    BOOST_FAIL("malformed JSON was accepted");
  } catch (const api_error& e) {
    BOOST_TEST(e.status() == 400);
    BOOST_TEST(e.param() == "body");
  }
}

// Both found by fuzz_http_request: a body whose bytes are not UTF-8 made the error body itself
// throw (the parse error quotes them), and a number too large for a double escaped as
// nlohmann's out_of_range rather than a 400.
BOOST_AUTO_TEST_CASE(bodies_with_invalid_utf8_or_huge_numbers_get_a_400_with_a_json_error) {
  for (const std::string& body : {std::string("{\"model\": \"ot\xff\xfe\", \"prompt\": \"p\"}"),
                                 std::string("{\"model\": \"tiny-llada\", \"prompt\": \"p\", \"slo_ms\": 77e2756}")}) {
    try {
      parse_completion(body, false, facts());
      BOOST_FAIL("accepted: " + body);
    } catch (const api_error& e) {
      BOOST_TEST(e.status() == 400);
      BOOST_TEST(e.param() == "body");
      BOOST_TEST(json::accept(e.body()));
    }
  }
}

BOOST_AUTO_TEST_CASE(stop_sequences_straddling_blocks_end_the_answer_identically) {
  auto f = chars({"END"}, 0);
  std::string out = f.push("abcdE");
  BOOST_TEST(out == "abcd");  // "E" might begin "END": held back
  out += f.push("NDxyz");
  BOOST_TEST(out == "abcd");
  BOOST_TEST(f.done());
  BOOST_TEST(f.hit_stop());
  BOOST_TEST(f.finish_reason() == "stop");
  auto whole = chars({"END"}, 0);
  BOOST_TEST(whole.push("abcdENDxyz") == "abcd");
  auto false_alarm = chars({"END"}, 0);
  auto a = false_alarm.push("abE");
  a += false_alarm.push("x");
  a += false_alarm.finish();
  BOOST_TEST(a == "abEx");
  BOOST_TEST(!false_alarm.hit_stop());
}

BOOST_AUTO_TEST_CASE(max_tokens_cuts_across_blocks) {
  auto f = chars({}, 5);
  auto out = f.push("abc");
  out += f.push("defgh");
  out += f.finish();
  BOOST_TEST(out == "abcde");
  BOOST_TEST(f.finish_reason() == "length");
}

BOOST_AUTO_TEST_CASE(keys_are_bearer_tokens_compared_whole) {
  api_keys k({"first-key-0123456789", "second-key-0123456789"});
  BOOST_TEST(k.allows("Bearer first-key-0123456789"));
  BOOST_TEST(k.allows("Bearer second-key-0123456789"));
  BOOST_TEST(!k.allows("Bearer first-key-012345678"));
  BOOST_TEST(!k.allows("Bearer first-key-01234567890"));
  BOOST_TEST(!k.allows("first-key-0123456789"));
  BOOST_TEST(!k.allows("Basic first-key-0123456789"));
  BOOST_TEST(!k.allows("Bearer "));
  BOOST_TEST(!k.allows(""));
  BOOST_TEST(constant_time_equal("abc", "abc"));
  BOOST_TEST(!constant_time_equal("abc", "abd"));
  BOOST_TEST(!constant_time_equal("abc", "ab"));
}

BOOST_AUTO_TEST_CASE(cluster_errors_map_onto_http_statuses) {
  auto status_of = [](const std::string& error) {
    dls::runtime::answer a;
    a.error = error;
    return answer_error(a);
  };
  auto shed = status_of(std::string(dls::runtime::overloaded_error) + "group node0/g0 already at tau 0.70: it would finish late");
  BOOST_TEST(shed.status() == 429);
  BOOST_TEST(json::parse(shed.body())["error"]["code"] == "overloaded");
  BOOST_TEST(std::string(shed.what()).find("group node0/g0 already at tau 0.70") != std::string::npos, shed.what());
  auto strict = status_of(std::string(dls::runtime::deadline_refused_error) +
                          "group node0/g0: cannot meet its deadline: 0.013 s of steps alone at tau 0.70, 0.001 s left");
  BOOST_TEST(strict.status() == 429);
  BOOST_TEST(json::parse(strict.body())["error"]["code"] == "deadline_unreachable");
  BOOST_TEST(std::string(strict.what()).find("0.013 s of steps alone") != std::string::npos, strict.what());
  BOOST_TEST(status_of("no live TP group for 120 s").status() == 503);
  BOOST_TEST(status_of("timed out after 300 s").status() == 504);
  BOOST_TEST(status_of("rejected: prompt (70 tokens) plus gen_length 16 exceeds the model's 64").status() == 413);
  BOOST_TEST(status_of("engine error: x").status() == 500);
}

BOOST_AUTO_TEST_CASE(errors_have_openai_shape) {
  auto j = json::parse(api_error(400, "temperature: nope", "temperature").body());
  BOOST_TEST(j["error"]["message"] == "temperature: nope");
  BOOST_TEST(j["error"]["type"] == "invalid_request_error");
  BOOST_TEST(j["error"]["param"] == "temperature");
  BOOST_TEST(j["error"]["code"].is_null());
  BOOST_TEST(json::parse(error_body(401, "x"))["error"]["type"] == "authentication_error");
}

BOOST_AUTO_TEST_CASE(the_dashboard_history_keeps_per_second_buckets_for_its_window) {
  recent_window w(3);
  w.add(100, true, 10, true, true);
  w.add(100, true, 30, true, false);
  w.add(101, false, 0, false, false);
  auto s = w.series();
  BOOST_TEST(s.size() == 2u);
  BOOST_TEST(s[0]["requests"] == 2);
  BOOST_TEST(s[0]["latency_ms_mean"] == 20.0);
  BOOST_TEST(s[0]["latency_ms_max"] == 30.0);
  BOOST_TEST(s[0]["slo_requests"] == 2);
  BOOST_TEST(s[0]["slo_met"] == 1);
  BOOST_TEST(s[1]["errors"] == 1);
  w.add(103, true, 5, false, false);  // 100 is now outside the 3-second window
  s = w.series();
  BOOST_TEST(s.size() == 2u);
  BOOST_TEST(s[0]["t"] == 101);
}

// The gateway's listening socket gets a deeper accept queue than the 5 cpp-httplib's compiled
// library listens with. Linux reports a listening socket's backlog as tcpi_sacked.
BOOST_AUTO_TEST_CASE(the_accept_queue_of_a_listening_socket_is_deepened) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE_EQUAL(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  BOOST_REQUIRE_EQUAL(::listen(fd, 5), 0);
  socklen_t len = sizeof addr;
  BOOST_REQUIRE_EQUAL(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  auto backlog = [&] {
    tcp_info info{};
    socklen_t n = sizeof info;
    BOOST_REQUIRE_EQUAL(::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &n), 0);
    return info.tcpi_sacked;
  };
  BOOST_TEST(backlog() == 5u);
  BOOST_TEST(deepen_accept_queue(port, 300) == "");
  BOOST_TEST(backlog() == 300u);
  // A port nobody here listens on is named.
  ::close(fd);
  BOOST_TEST(deepen_accept_queue(port, 300) == "no listening socket on port " + std::to_string(port));
}
