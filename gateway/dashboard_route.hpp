#pragma once
// GET /dashboard (the static page, no key) and GET /v1/dashboard/data (what it polls:
// the status, the requests in flight with τ and slack, and the per-second history).
#include "gateway/gateway_context.hpp"

namespace httplib {
class Server;
}

namespace dls::gateway {

void add_dashboard_routes(httplib::Server& svr, gateway_context& ctx);

}  // namespace dls::gateway
