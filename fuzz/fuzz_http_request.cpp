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
  facts.engine.block_length = 8;
  facts.engine.gen_length = 32;
  try {
    const auto r = dls::gateway::parse_completion(body, chat, facts);
    if (r.gen_length < facts.engine.block_length || r.gen_length % facts.engine.block_length != 0 || r.gen_length > facts.max_seq)
      std::abort();
    if (r.max_tokens < 0 || r.max_tokens > r.gen_length) std::abort();
    if (r.threshold != -1 && !(r.threshold >= 0 && r.threshold <= 1)) std::abort();
    if (r.min_threshold != -1 && !(r.min_threshold >= 0 && r.min_threshold <= 1)) std::abort();
    if (r.slo_ms < 0) std::abort();
    // Dream's sampler options and the commit rule: the cluster's (-1) or what
    // decode_settings::validate accepts, and together with this cluster's settings (threshold,
    // schedule even, default eps) one decode the engine runs.
    if (r.top_p != -1 && !(r.top_p > 0 && r.top_p <= 1)) std::abort();
    if (r.top_k < -1) std::abort();
    if (r.alg_temp != -1 && !(r.alg_temp >= 0 && std::isfinite(r.alg_temp))) std::abort();
    if (r.schedule < -1 || r.schedule > 1) std::abort();
    if (r.eps != -1 && !(r.eps >= 0 && r.eps < 1)) std::abort();
    if (r.rule < -1 || r.rule > static_cast<int>(dls::common::commit_rule::origin)) std::abort();
    if (r.steps_per_block < -1 || r.steps_per_block > dls::common::max_steps_per_block) std::abort();
    dls::common::decode_settings d;
    if (r.rule >= 0) d.rule = static_cast<dls::common::commit_rule>(r.rule);
    if (r.steps_per_block >= 0) d.steps_per_block = r.steps_per_block;
    if (r.alg_temp >= 0) d.alg_temp = r.alg_temp;
    if (r.schedule >= 0) d.schedule = static_cast<dls::common::step_schedule>(r.schedule);
    if (r.eps >= 0) d.eps = r.eps;
    if (!d.validate().empty()) std::abort();
    // Options only some rules use are refused under the others, whatever their value.
    const bool counted_or_origin = d.counted() || d.rule == dls::common::commit_rule::origin;
    if (!counted_or_origin && (r.eps != -1 || r.steps_per_block != -1 || r.schedule == 1)) std::abort();
    if (r.chat != chat || (chat && r.messages.empty())) std::abort();
  } catch (const dls::gateway::api_error& e) {
    if (e.status() != 400 && e.status() != 404) std::abort();
    if (!nlohmann::json::accept(e.body())) std::abort();
  }
  return 0;
}
