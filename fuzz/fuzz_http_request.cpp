// An HTTP request body for /v1/completions or /v1/chat/completions (the first byte picks which):
// a bad body must end in api_error with status 400 or 404 and a JSON error body; an accepted
// one must carry only what the cluster can run.
#include "gateway/api_error.hpp"
#include "gateway/openai_request.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  dls::gateway::model_facts facts;
  facts.id = "tiny-llada";
  facts.max_seq = 64;
  facts.block_length = 8;
  facts.gen_length = 32;
  try {
    const auto r = dls::gateway::parse_completion(body, chat, facts);
    if (r.gen_length < facts.block_length || r.gen_length % facts.block_length != 0 || r.gen_length > facts.max_seq)
      std::abort();
    if (r.max_tokens < 0 || r.max_tokens > r.gen_length) std::abort();
    if (r.threshold != -1 && !(r.threshold >= 0 && r.threshold <= 1)) std::abort();
    if (r.min_threshold != -1 && !(r.min_threshold >= 0 && r.min_threshold <= 1)) std::abort();
    if (r.slo_ms < 0) std::abort();
    // Dream's sampler options: the cluster's (-1) or what decode_settings::validate accepts, and
    // no alg_temp > 0 under this cluster's threshold rule.
    if (r.top_p != -1 && !(r.top_p > 0 && r.top_p <= 1)) std::abort();
    if (r.top_k < -1) std::abort();
    if (r.alg_temp != -1 && !(r.alg_temp >= 0 && std::isfinite(r.alg_temp))) std::abort();
    if (r.alg_temp > 0 && facts.rule == dls::common::commit_rule::threshold) std::abort();
    // A schedule is the cluster's (-1) or even (0); dream_linear is refused under threshold.
    if (r.schedule != -1 && r.schedule != 0) std::abort();
    if (r.eps != -1) std::abort();  // eps would change nothing under threshold: always refused
    if (r.chat != chat || (chat && r.messages.empty())) std::abort();
  } catch (const dls::gateway::api_error& e) {
    if (e.status() != 400 && e.status() != 404) std::abort();
    if (!nlohmann::json::accept(e.body())) std::abort();
  }
  return 0;
}
