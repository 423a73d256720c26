#include "gateway/openai_response.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

namespace dls::gateway {

using json = nlohmann::json;

response_ids make_ids(bool chat, const std::string& model) {
  // Unique within and across head processes: a random process prefix and a counter.
  static const uint64_t prefix = std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s-%08llx%08llx", chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(prefix & 0xffffffffu), static_cast<unsigned long long>(++counter));
  response_ids r;
  r.id = buf;
  r.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
  r.model = model;
  r.chat = chat;
  return r;
}

json usage_json(std::size_t prompt_tokens, std::size_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json dlm_extras(const runtime::answer& a, int slo_ms) {
  json j{{"steps", a.steps},
         {"tokens", a.tokens},
         {"tokens_per_step", a.steps > 0 ? static_cast<double>(a.tokens) / a.steps : 0.0},
         {"threshold", a.threshold},
         {"latency_ms", a.latency_ms},
         {"group", a.group},
         {"node", a.node},
         {"moves", a.moves},
         {"request_id", a.request_id},
         // The cluster's verdict against the deadline it scheduled by: slo_ms, or the one derived
         // from scheduler.slo_scale (true when it had none); benchmarks read it.
         {"deadline_met", a.slo_met}};
  if (slo_ms > 0) {
    j["slo_ms"] = slo_ms;
    j["slo_met"] = a.slo_met;
  } else {
    j["slo_met"] = nullptr;
  }
  return j;
}

json completion_json(const response_ids& ids, const std::string& text, const std::string& finish_reason,
                     const json& usage, const json& extras) {
  json choice{{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (ids.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  return {{"id", ids.id},
          {"object", ids.chat ? "chat.completion" : "text_completion"},
          {"created", ids.created},
          {"model", ids.model},
          {"choices", json::array({choice})},
          {"usage", usage},
          {"dilaserve", extras}};
}

json chunk_json(const response_ids& ids, const std::string& text, const std::string& finish_reason, bool first) {
  json choice{{"index", 0}, {"logprobs", nullptr}};
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(finish_reason);
  if (ids.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", ids.id},
          {"object", ids.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", ids.created},
          {"model", ids.model},
          {"choices", json::array({choice})}};
}

std::string sse_event(const std::string& data) { return "data: " + data + "\n\n"; }

}  // namespace dls::gateway
