#include "gateway/dashboard_route.hpp"
#include "gateway/json_text.hpp"

#include "gateway/api_error.hpp"
#include "gateway/dashboard_page.hpp"

#include <httplib.h>

#include <chrono>

namespace dls::gateway {

using json = nlohmann::json;

namespace {

constexpr auto query_timeout = std::chrono::seconds(5);
// The page lists at most this many requests in flight; a table longer than a screen
// tells an operator nothing more.
constexpr std::size_t max_listed_requests = 200;

json in_flight(const std::vector<runtime::actor_info>& rows) {
  auto now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto out = json::array();
  for (const auto& r : rows) {
    if (r.kind != "request" || r.state == "DEAD") continue;
    auto d = json::parse(r.details, nullptr, false);
    if (!d.is_object()) continue;
    json row{{"name", r.name},        {"status", d.value("status", "")}, {"tau", d.value("tau", 0.0)},
             {"group", d.value("group", "")}, {"steps", d.value("steps", 0)},   {"tokens", d.value("tokens", 0)}};
    if (d.contains("arrival_unix_ms")) {
      double age = static_cast<double>(now_ms - d["arrival_unix_ms"].get<int64_t>());
      row["age_ms"] = age;
      if (d.contains("slo_ms")) {
        row["slo_ms"] = d["slo_ms"];
        row["slack_ms"] = d["slo_ms"].get<double>() - age;
      }
    }
    out.push_back(row);
    if (out.size() == max_listed_requests) break;
  }
  return out;
}

}  // namespace

void add_dashboard_routes(httplib::Server& svr, gateway_context& ctx) {
  svr.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dashboard_html(), "text/html; charset=utf-8");
  });
  svr.Get("/v1/dashboard/data", [&ctx](const httplib::Request&, httplib::Response& res) {
    auto status = ctx.view.refresh(std::chrono::duration_cast<std::chrono::milliseconds>(query_timeout));
    auto rows = ctx.bridge.actors(std::chrono::duration_cast<std::chrono::milliseconds>(query_timeout));
    if (!status || !rows) {
      api_error e(503, "the head did not answer within 5 s");
      res.status = e.status();
      res.set_content(e.body(), "application/json");
      return;
    }
    json j{{"status", *status}, {"in_flight", in_flight(*rows)}, {"series", ctx.recent.series()}};
    res.set_content(json_text(j), "application/json");
  });
}

}  // namespace dls::gateway
