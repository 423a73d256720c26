#include "gateway/routes.hpp"

#include "gateway/api_error.hpp"
#include "gateway/completion_route.hpp"
#include "gateway/dashboard_route.hpp"
#include "gateway/json_text.hpp"
#include "runtime/log.hpp"

#include <httplib.h>

#include <set>

namespace dls::gateway {

using json = nlohmann::json;

namespace {

constexpr auto status_timeout = std::chrono::seconds(5);

// Paths outside this set are counted as "other", so scanners cannot blow up the label set.
std::string route_label(const std::string& path) {
  static const std::set<std::string> known{"/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/cluster",
                                           "/health", "/metrics", "/dashboard",
                                           "/v1/dashboard/data"};
  if (known.count(path)) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

void send_error(httplib::Response& res, const api_error& e) {
  res.status = e.status();
  res.set_content(e.body(), "application/json");
}

// Runs a handler and turns what it throws into OpenAI's error shape.
template <class F>
httplib::Server::Handler guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const api_error& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      runtime::log_line("http", std::string("internal error on ") + req.path + ": " + e.what());
      send_error(res, api_error(500, std::string("internal error: ") + e.what()));
    }
  };
}

json model_object(const model_facts& f) {
  return {{"id", f.id}, {"object", "model"}, {"created", 0}, {"owned_by", "dilaserve"}};
}

}  // namespace

void add_routes(httplib::Server& svr, gateway_context& ctx) {
  // The key check runs before routing, so an unknown path without a key gets 401 and
  // reveals nothing about which paths exist.
  svr.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    // The dashboard page is static; the data it polls needs a key like every other route.
    if (req.path == "/health" || req.path == "/dashboard") return httplib::Server::HandlerResponse::Unhandled;
    if (req.path == "/metrics" && ctx.http.metrics_public) return httplib::Server::HandlerResponse::Unhandled;
    if (ctx.keys.allows(req.get_header_value("Authorization"))) return httplib::Server::HandlerResponse::Unhandled;
    auto message = req.has_header("Authorization")
                       ? "Incorrect API key provided (send Authorization: Bearer KEY with a key from http.api_keys_file)"
                       : "Missing API key (send Authorization: Bearer KEY)";
    send_error(res, api_error(401, message, "", "invalid_api_key"));
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_error_handler(httplib::Server::HandlerWithResponse([&ctx](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    if (res.status == 413)
      message = "the request body exceeds http.max_body_bytes (" + std::to_string(ctx.http.max_body_bytes) + " bytes)";
    else if (res.status == 404)
      message = "no route " + req.method + " " + req.path;
    else if (res.status == 414)
      message = "the request URI exceeds " + std::to_string(CPPHTTPLIB_REQUEST_URI_MAX_LENGTH) + " bytes";
    else if (res.status == 400)
      message = "malformed HTTP request: a bad request line or header, or a header line over " +
                std::to_string(CPPHTTPLIB_HEADER_MAX_LENGTH) + " bytes";
    else
      message = "HTTP " + std::to_string(res.status);
    res.set_content(error_body(res.status, message), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, api_error(500, "internal error"));
  });
  // Counts every response, those of httplib itself (413, 404) included. Never logs
  // headers: they carry the API key.
  svr.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
    ctx.metrics.count_response(route_label(req.path), res.status);
  });

  svr.Post("/v1/completions",
           guarded([&ctx](const httplib::Request& req, httplib::Response& res) { serve_completion(ctx, req, res, false); }));
  svr.Post("/v1/chat/completions",
           guarded([&ctx](const httplib::Request& req, httplib::Response& res) { serve_completion(ctx, req, res, true); }));
  svr.Get("/v1/models", guarded([&ctx](const httplib::Request&, httplib::Response& res) {
            json j{{"object", "list"}, {"data", json::array({model_object(ctx.facts)})}};
            res.set_content(json_text(j), "application/json");
          }));
  svr.Get(R"(/v1/models/(.+))", guarded([&ctx](const httplib::Request& req, httplib::Response& res) {
            if (req.matches[1] != ctx.facts.id)
              throw api_error(404, "The model '" + std::string(req.matches[1]) + "' does not exist", "model",
                              "model_not_found");
            res.set_content(json_text(model_object(ctx.facts)), "application/json");
          }));
  svr.Get("/v1/cluster", guarded([&ctx](const httplib::Request&, httplib::Response& res) {
            auto j = ctx.view.refresh(status_timeout);
            if (!j) throw api_error(503, "the head did not answer a status query within 5 s");
            res.set_content(json_text(*j), "application/json");
          }));
  svr.Get("/health", guarded([&ctx](const httplib::Request&, httplib::Response& res) {
            bool live = ctx.view.has_live_group();
            res.status = live ? 200 : 503;
            res.set_content(json_text(json{{"status", live ? "ok" : "no live TP group"}}), "application/json");
          }));
  add_dashboard_routes(svr, ctx);
  svr.Get("/metrics", guarded([&ctx](const httplib::Request&, httplib::Response& res) {
            // The cluster gauges are read from the head when scraped, not continuously.
            ctx.view.refresh(std::chrono::duration_cast<std::chrono::milliseconds>(status_timeout));
            res.set_content(ctx.metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
          }));
}

}  // namespace dls::gateway
