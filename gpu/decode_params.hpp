#pragma once
// The engine's names for the shared decode settings (common/decode_settings.hpp).
#include "common/decode_settings.hpp"

namespace dls::gpu {

using common::cache_mode;
using common::commit_rule;
using common::dream_default_eps;
using common::parse_cache_mode;
using common::parse_commit_rule;
using common::parse_step_schedule;
using common::proposal_score;
using common::score_of;
using common::step_kind;
using common::step_schedule;
using common::to_string;
using decode_params = common::decode_settings;

}  // namespace dls::gpu
