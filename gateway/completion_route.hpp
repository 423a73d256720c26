#pragma once
// POST /v1/completions and /v1/chat/completions: whole answers, or SSE streams with
// one chunk per committed block.
#include "gateway/gateway_context.hpp"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace dls::gateway {

void serve_completion(gateway_context& ctx, const httplib::Request& req, httplib::Response& res, bool chat);

}  // namespace dls::gateway
