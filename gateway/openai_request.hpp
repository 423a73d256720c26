#pragma once
// OpenAI's /v1/completions and /v1/chat/completions request bodies, mapped onto what
// the cluster can run. Every field is either honoured, or rejected with a 400 that
// names it: nothing is silently ignored (docs/http.md lists each field).
#include "common/decode_settings.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dls::gateway {

/// What the served model and the cluster's decoding defaults allow.
struct model_facts {
  std::string id;   // the model's name in /v1/models and in `model`
  int max_seq = 0;  // prompt plus answer tokens
  // The cluster's engine settings: what a request that names none decodes with (block_length
  // is not per request yet), and what a request's own options must make one decode with.
  common::decode_settings engine;
  // Whether every node's backend can truncate distributions (only the CPU's can): a top_p or
  // top_k the groups would refuse is a 400 here instead of a failed answer.
  bool truncates = true;
  // Whether every node's backend can rank by the margin and entropy rules' scores (only the
  // CPU's can), for a request that names one of them.
  bool scores = true;
};

struct completion_request {
  bool chat = false;
  std::string model;
  std::string prompt;         // chat: the last message's content (the rule without a template)
  std::string prompt_field;  // "prompt" or "messages", for error messages
  std::vector<std::pair<std::string, std::string>> messages;  // chat: (role, text) in order
  int max_tokens = 0;        // 0: no limit beyond gen_length
  int gen_length = 0;        // what the cluster decodes (a multiple of block_length)
  double threshold = -1;     // τ, pinned for the request; < 0: the cluster's scheduler decides
  double min_threshold = -1;  // the floor the scheduler may not lower τ below; < 0: none
  bool reject_on_miss = false;  // on_miss: "reject": refused at once if its deadline cannot be met
  int slo_ms = 0;
  bool stream = false;
  bool include_usage = false;
  std::vector<std::string> stop;
  // Dream's sampler options, validated as decode_settings does; negative: the cluster's engine.*.
  double top_p = -1;
  int top_k = -1;
  double alg_temp = -1;
  int schedule = -1;  // step_schedule's value; negative: the cluster's engine.schedule
  double eps = -1;    // Dream's eps; negative: the cluster's engine.eps
  // The commit rule (commit_rule's value, from `commit` or Dream's `alg`) and its steps per block
  // (`steps_per_block` or Dream's `steps`); negative: engine.commit and engine.steps_per_block.
  int rule = -1;
  int steps_per_block = -1;
};

/// Parses and checks a body; throws api_error (400 naming the field, 404 unknown model).
completion_request parse_completion(const std::string& body, bool chat, const model_facts& facts);

}  // namespace dls::gateway
