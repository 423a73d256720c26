#include "gateway/openai_request.hpp"

#include "gateway/api_error.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

namespace dls::gateway {

using json = nlohmann::json;

namespace {

// OpenAI allows at most four stop sequences.
constexpr std::size_t max_stop_sequences = 4;
// The largest SLO a request may carry: one day, in ms (fits int32).
constexpr double max_slo_ms = 86'400'000;

// A bound as a person writes it: 2 and 0.05, not 2.000000 and 0.050000.
std::string shortest(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.15g", v);
  return b;
}

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  throw api_error(400, field + ": " + why, field);
}

int integer(const json& v, const std::string& field, int lo, int hi) {
  if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
    bad(field, "must be an integer");
  double d = v.get<double>();
  if (d < lo || d > hi) bad(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(d);
}

double number(const json& v, const std::string& field, double lo, double hi) {
  if (!v.is_number()) bad(field, "must be a number");
  double d = v.get<double>();
  if (!(d >= lo && d <= hi)) bad(field, "must be in [" + shortest(lo) + ", " + shortest(hi) + "]");
  return d;
}

std::string text_content(const json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(field, "must be a string or a list of text parts");
  std::string out;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      bad(field, "only parts of type \"text\" are supported");
    out += part["text"].get<std::string>();
  }
  return out;
}

// The last message must come from the user. Without a chat template its content is the
// prompt and earlier turns are not shown to the model (docs/http.md); with one, the
// gateway renders all of them. Roles other than these four are refused.
std::string chat_prompt(const json& messages, std::vector<std::pair<std::string, std::string>>& turns) {
  if (!messages.is_array() || messages.empty()) bad("messages", "must be a non-empty list");
  static const std::set<std::string> roles{"system", "developer", "user", "assistant"};
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    auto at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(at, "must be an object");
    if (!m.contains("role") || !m["role"].is_string() || !roles.count(m["role"].get<std::string>()))
      bad(at + ".role", "must be one of system, developer, user, assistant");
    if (!m.contains("content")) bad(at + ".content", "is required");
    turns.emplace_back(m["role"].get<std::string>(), text_content(m["content"], at + ".content"));
  }
  const auto& last = messages.back();
  if (last["role"] != "user")
    bad("messages", "the last message must have role \"user\" (its content is the prompt)");
  return text_content(last["content"], "messages[" + std::to_string(messages.size() - 1) + "].content");
}

// Fields a client may send that are harmless to accept only at their neutral value.
void neutral(const json& body, const std::string& field, const json& neutral_value) {
  if (body.contains(field) && !body[field].is_null() && body[field] != neutral_value)
    bad(field, "is not supported by this server (only " + neutral_value.dump() + ")");
}

bool counted(common::commit_rule rule) {
  common::decode_settings s;
  s.rule = rule;
  return s.counted();
}

// Dream's names for its `alg`s, as diffusion_generate spells them, and the rules they are here.
common::commit_rule dream_alg(const json& v, const std::string& field) {
  if (v == "maskgit_plus") return common::commit_rule::quota;
  if (v == "topk_margin") return common::commit_rule::margin;
  if (v == "entropy") return common::commit_rule::entropy;
  if (v == "origin") return common::commit_rule::origin;
  bad(field, "must be one of Dream's \"origin\", \"maskgit_plus\", \"topk_margin\", \"entropy\" (or give `commit` "
             "with this server's rule names)");
}

// The DLM fields a body gave, by name ("alg_temp"), with where it gave them ("extra_body.alg_temp").
using given_fields = std::map<std::string, std::string>;

// `field` and `other` are two spellings of one setting: refused when both are given.
void once(const given_fields& given, const std::string& other, const std::string& field) {
  if (given.count(other)) bad(field, "give " + other + " or " + field.substr(field.rfind('.') + 1) + ", not both");
}

void parse_extras(const json& src, completion_request& r, const model_facts& facts, const std::string& prefix,
                  given_fields& given) {
  for (auto it = src.begin(); it != src.end(); ++it) {
    const auto& k = it.key();
    const auto& v = it.value();
    auto field = prefix + k;
    if (v.is_null()) continue;
    if (k == "threshold") {
      r.threshold = number(v, field, 0.0, 1.0);
    } else if (k == "gen_length") {
      r.gen_length = integer(v, field, 1, facts.max_seq);
      if (r.gen_length % facts.engine.block_length != 0)
        bad(field, "must be a multiple of the cluster's block_length (" + std::to_string(facts.engine.block_length) + ")");
    } else if (k == "block_length") {
      if (integer(v, field, 1, facts.max_seq) != facts.engine.block_length)
        bad(field, "per-request block_length is not supported yet; the cluster decodes with " +
                       std::to_string(facts.engine.block_length));
    } else if (k == "slo_ms" || k == "deadline_ms") {
      if (r.slo_ms > 0) bad(field, "give slo_ms or deadline_ms, not both");
      r.slo_ms = static_cast<int>(number(v, field, 1, max_slo_ms));
    } else if (k == "min_threshold") {
      r.min_threshold = number(v, field, 0.0, 1.0);
    } else if (k == "on_miss") {
      if (!v.is_string() || (v != "serve" && v != "reject")) bad(field, "must be \"serve\" or \"reject\"");
      r.reject_on_miss = v == "reject";
    } else if (k == "top_k") {
      r.top_k = integer(v, field, 0, std::numeric_limits<int>::max());
    } else if (k == "alg_temp") {
      if (!v.is_number() || !(v.get<double>() >= 0.0) || !std::isfinite(v.get<double>()))
        bad(field, "must be a finite number >= 0 (0: commit the highest scores)");
      r.alg_temp = v.get<double>();
    } else if (k == "schedule") {
      if (!v.is_string() || (v != "even" && v != "dream_linear"))
        bad(field, "must be \"even\" or \"dream_linear\"");
      r.schedule = static_cast<int>(common::parse_step_schedule(v.get<std::string>()));
    } else if (k == "eps") {
      if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() < 1.0))
        bad(field, "must be a number in [0, 1) (Dream's last timestep; default 0.001)");
      r.eps = v.get<double>();
    } else if (k == "commit") {
      once(given, "alg", field);
      if (!v.is_string()) bad(field, "must be a string");
      try {
        r.rule = static_cast<int>(common::parse_commit_rule(v.get<std::string>()));
      } catch (const std::invalid_argument&) {
        bad(field, "must be one of \"quota\", \"threshold\", \"factor\", \"margin\", \"entropy\", \"origin\"");
      }
    } else if (k == "alg") {
      once(given, "commit", field);
      r.rule = static_cast<int>(dream_alg(v, field));
    } else if (k == "steps_per_block" || k == "steps") {
      once(given, k == "steps" ? "steps_per_block" : "steps", field);
      r.steps_per_block = integer(v, field, 0, common::max_steps_per_block);
    } else if (k == "priority") {
      if (integer(v, field, -1000000, 1000000) != 0)
        bad(field, "request priorities are not supported yet (only 0)");
    } else {
      bad(field, "unknown field");
    }
    given[k] = field;
  }
}

// After every field is read: the options that only some rules use, against the rule the request
// decodes with (its own `commit` or `alg`, else the cluster's engine.commit), each refused naming
// its field; then the whole decode, the cluster's settings with the request's, as the engine
// would check it.
void check_rule(const completion_request& r, const model_facts& facts, const given_fields& given) {
  const bool own = r.rule >= 0;
  const auto rule = own ? static_cast<common::commit_rule>(r.rule) : facts.engine.rule;
  const std::string rule_field = !own ? "" : given.count("commit") ? given.at("commit") : given.at("alg");
  const std::string decodes = std::string(own ? "the request decodes with " : "the cluster decodes with ") +
                              common::to_string(rule) + " (" + (own ? rule_field : "engine.commit") + ")";
  auto field = [&](const char* k) { return given.count(k) ? given.at(k) : std::string(); };
  const bool counts = counted(rule);
  const bool origin = rule == common::commit_rule::origin;
  if (own && !facts.scores && common::score_of(rule) != common::proposal_score::probability)
    bad(rule_field, std::string("this cluster's CUDA backend cannot rank by the ") + common::to_string(rule) +
                        " rule's score (only quota, threshold, factor, origin)");
  // The same refusals decode_settings::validate gives, here as a 400 naming the field.
  if (r.alg_temp > 0 && !counts)
    bad(field("alg_temp"), "samples the positions of a fixed number of commits: it needs the quota, margin or "
                           "entropy rule, and " + decodes);
  if (r.schedule == static_cast<int>(common::step_schedule::dream_linear) && !counts && !origin)
    bad(field("schedule"), "dream_linear sets how many a quota, margin or entropy step commits, and " + decodes);
  if (r.eps >= 0 && !counts && !origin)
    bad(field("eps"), "sets the timesteps of schedule dream_linear and of the origin rule, and " + decodes);
  if (r.steps_per_block >= 0 && !counts && !origin) {
    const auto steps = given.count("steps") ? given.at("steps") : given.at("steps_per_block");
    bad(steps, "sets how many steps a quota, margin, entropy or origin block takes, and " + decodes);
  }
  const auto why = common::with_request(facts.engine, r).validate();
  if (why.empty()) return;
  // The reason starts with the setting it is about: named when the request gave it, else the
  // request's rule, else the first setting it gave (the cluster's own settings make one decode).
  auto about = field(why.substr(0, why.find(' ')).c_str());
  if (about.empty()) about = rule_field;
  for (const char* k : {"schedule", "eps", "alg_temp", "steps_per_block", "steps"})
    if (about.empty()) about = field(k);
  bad(about.empty() ? "body" : about, why + " (the cluster's engine settings with this request's)");
}

}  // namespace

completion_request parse_completion(const std::string& body, bool chat, const model_facts& facts) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number too large for a double (1e999).
    throw api_error(400, std::string("the body is not valid JSON: ") + e.what(), "body");
  }
  if (!j.is_object()) throw api_error(400, "the body must be a JSON object", "body");
  completion_request r;
  r.chat = chat;
  r.prompt_field = chat ? "messages" : "prompt";

  static const std::set<std::string> openai_fields{
      "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed", "stop",
      "stream", "stream_options", "n", "top_p", "user", "frequency_penalty", "presence_penalty", "logprobs",
      "echo", "best_of", "suffix", "extra_body"};
  static const std::set<std::string> dlm_fields{"threshold", "min_threshold", "block_length", "gen_length",
                                                "slo_ms", "deadline_ms", "priority", "on_miss", "top_k", "alg_temp",
                                                "schedule", "eps", "commit", "alg", "steps_per_block", "steps"};
  json extras = json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (dlm_fields.count(it.key()))
      extras[it.key()] = it.value();
    else if (!openai_fields.count(it.key()))
      bad(it.key(), "unknown field");
  }
  if (j.contains("extra_body") && !j["extra_body"].is_null()) {
    if (!j["extra_body"].is_object()) bad("extra_body", "must be an object");
    for (auto it = j["extra_body"].begin(); it != j["extra_body"].end(); ++it)
      if (extras.contains(it.key())) bad("extra_body." + it.key(), "is also given at the top level");
  }

  if (!j.contains("model") || !j["model"].is_string()) bad("model", "is required and must be a string");
  r.model = j["model"].get<std::string>();
  if (r.model != facts.id)
    throw api_error(404, "The model '" + r.model + "' does not exist; this cluster serves '" + facts.id + "'",
                    "model", "model_not_found");

  if (chat) {
    if (j.contains("prompt")) bad("prompt", "is for /v1/completions; chat takes messages");
    if (!j.contains("messages")) bad("messages", "is required");
    r.prompt = chat_prompt(j["messages"], r.messages);
  } else {
    if (j.contains("messages")) bad("messages", "is for /v1/chat/completions; completions take prompt");
    if (!j.contains("prompt")) bad("prompt", "is required");
    const auto& p = j["prompt"];
    if (p.is_string())
      r.prompt = p.get<std::string>();
    else if (p.is_array() && p.size() == 1 && p[0].is_string())
      r.prompt = p[0].get<std::string>();
    else
      bad("prompt", "must be a string (or a list of exactly one string: n and batched prompts are not supported)");
  }
  if (r.prompt.empty()) bad(r.prompt_field, "must not be empty");

  for (const char* f : {"max_tokens", "max_completion_tokens"})
    if (j.contains(f) && !j[f].is_null()) {
      if (r.max_tokens > 0) bad(f, "give max_tokens or max_completion_tokens, not both");
      r.max_tokens = integer(j[f], f, 1, facts.max_seq);
    }
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    auto t = number(j["temperature"], "temperature", 0.0, 2.0);
    if (t != facts.engine.temperature)
      bad("temperature", "per-request temperature is not supported yet; the cluster decodes at " +
                             json(facts.engine.temperature).dump());
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) bad("seed", "must be an integer");
    // At temperature 0 decoding is argmax, the same for every seed, so any seed is honoured.
    if (facts.engine.temperature != 0 && j["seed"].get<int64_t>() != static_cast<int64_t>(facts.engine.seed))
      bad("seed", "per-request seeds are not supported yet; the cluster samples with seed " +
                      std::to_string(facts.engine.seed));
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const auto& s = j["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= max_stop_sequences) {
      for (const auto& e : s) {
        if (!e.is_string()) bad("stop", "must be a string or a list of strings");
        r.stop.push_back(e.get<std::string>());
      }
    } else {
      bad("stop", "must be a string or a list of at most 4 strings");
    }
    for (const auto& e : r.stop)
      if (e.empty()) bad("stop", "stop sequences must not be empty");
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) bad("stream", "must be a boolean");
    r.stream = j["stream"].get<bool>();
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const auto& so = j["stream_options"];
    if (!r.stream) bad("stream_options", "is only allowed with stream: true");
    if (!so.is_object()) bad("stream_options", "must be an object");
    for (auto it = so.begin(); it != so.end(); ++it) {
      if (it.key() != "include_usage") bad("stream_options." + it.key(), "unknown field");
      if (!it.value().is_boolean()) bad("stream_options.include_usage", "must be a boolean");
      r.include_usage = it.value().get<bool>();
    }
  }
  if (j.contains("n") && !j["n"].is_null() && integer(j["n"], "n", 1, 128) != 1)
    bad("n", "only n = 1 is supported");
  if (j.contains("user") && !j["user"].is_null() && !j["user"].is_string()) bad("user", "must be a string");
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const auto& v = j["top_p"];
    // OpenAI allows 0; an empty nucleus is no distribution, so (0, 1] as decode_settings has it.
    if (!v.is_number() || !(v.get<double>() > 0.0 && v.get<double>() <= 1.0))
      bad("top_p", "must be a number in (0, 1] (1: no nucleus truncation)");
    r.top_p = v.get<double>();
  }
  neutral(j, "frequency_penalty", 0);
  neutral(j, "presence_penalty", 0);
  neutral(j, "logprobs", chat ? json(false) : json(nullptr));
  neutral(j, "echo", false);
  neutral(j, "best_of", 1);
  neutral(j, "suffix", nullptr);

  given_fields given;
  parse_extras(extras, r, facts, "", given);
  if (j.contains("extra_body") && j["extra_body"].is_object())
    parse_extras(j["extra_body"], r, facts, "extra_body.", given);
  check_rule(r, facts, given);
  if (!facts.truncates) {
    if (r.top_p >= 0 && r.top_p < 1) bad("top_p", "this cluster's CUDA backend cannot truncate distributions (only 1)");
    if (r.top_k > 0) bad("top_k", "this cluster's CUDA backend cannot truncate distributions (only 0)");
  }

  if (r.gen_length == 0) {
    if (r.max_tokens > 0) {
      // The engine decodes whole blocks: round up, then cut the answer at max_tokens.
      r.gen_length = (r.max_tokens + facts.engine.block_length - 1) / facts.engine.block_length * facts.engine.block_length;
    } else {
      r.gen_length = facts.engine.gen_length;
    }
  } else if (r.max_tokens > r.gen_length) {
    bad("max_tokens", "exceeds gen_length (" + std::to_string(r.gen_length) + ")");
  }
  return r;
}

}  // namespace dls::gateway
