#pragma once
// OpenAI's response objects: text_completion / chat.completion, their streamed chunks,
// usage, and the DLM extras under "dilaserve".
#include "runtime/messages.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace dls::gateway {

struct response_ids {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool chat = false;
};

response_ids make_ids(bool chat, const std::string& model);

nlohmann::json usage_json(std::size_t prompt_tokens, std::size_t completion_tokens);

/// What only a DLM server can say about a request: steps, tokens per step, τ, SLO, group.
nlohmann::json dlm_extras(const runtime::answer& a, int slo_ms);

/// The whole (non-streamed) response.
nlohmann::json completion_json(const response_ids& ids, const std::string& text, const std::string& finish_reason,
                               const nlohmann::json& usage, const nlohmann::json& extras);

/// One streamed chunk: `text` (may be empty), `finish_reason` null when empty.
nlohmann::json chunk_json(const response_ids& ids, const std::string& text, const std::string& finish_reason,
                          bool first);

/// One server-sent event carrying `data`.
std::string sse_event(const std::string& data);

}  // namespace dls::gateway
