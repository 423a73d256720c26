#pragma once
// The HTTP status of a request the cluster ended with an error (its answer's `error`).
#include "gateway/api_error.hpp"
#include "runtime/messages.hpp"

namespace dls::gateway {

/// 429 for a load-shedding refusal, 503 when no group could take it, 504 past its timeout,
/// 413 over the model's context, else 500; the message keeps the cluster's reason.
api_error answer_error(const runtime::answer& a);

}  // namespace dls::gateway
