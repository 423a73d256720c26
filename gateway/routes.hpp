#pragma once
// Every route of the gateway, the key check in front of them, and the OpenAI error
// shape for responses httplib itself produces (404, 413).
#include "gateway/gateway_context.hpp"

namespace httplib {
class Server;
}

namespace dls::gateway {

void add_routes(httplib::Server& svr, gateway_context& ctx);

}  // namespace dls::gateway
