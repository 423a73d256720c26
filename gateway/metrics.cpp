#include "gateway/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <set>
#include <sstream>

namespace dls::gateway {

namespace pm = prometheus;

namespace {
// Seconds, from a cached tiny-model answer (milliseconds) to a large model's long
// answer under load (a minute).
const pm::Histogram::BucketBoundaries latency_buckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                      0.5,   1,      2.5,   5,    10,    30,   60};
// Tokens committed per denoising step: 1 is autoregressive speed, a block per step the
// most parallel decoding can do with the shipped block lengths.
const pm::Histogram::BucketBoundaries tokens_per_step_buckets{1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32};
// τ lies in [0, 1].
const pm::Histogram::BucketBoundaries tau_buckets{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1};
}  // namespace

gateway_metrics::gateway_metrics() : registry_(std::make_shared<pm::Registry>()) {
  responses_ = &pm::BuildCounter()
                    .Name("dilaserve_http_responses_total")
                    .Help("HTTP responses of the gateway by route and status code")
                    .Register(*registry_);
  answers_ = &pm::BuildCounter()
                  .Name("dilaserve_requests_total")
                  .Help("Requests the cluster ended, by outcome (ok or error)")
                  .Register(*registry_);
  slo_ = &pm::BuildCounter()
              .Name("dilaserve_slo_requests_total")
              .Help("Finished requests that carried an SLO, by whether it was met")
              .Register(*registry_);
  moves_ = &pm::BuildCounter()
                .Name("dilaserve_request_moves_total")
                .Help("Migrations and re-placements of finished requests between TP groups")
                .Register(*registry_)
                .Add({});
  latency_ = &pm::BuildHistogram()
                  .Name("dilaserve_request_duration_seconds")
                  .Help("Time from receiving a completion request to its last byte of answer")
                  .Register(*registry_)
                  .Add({}, latency_buckets);
  first_block_ = &pm::BuildHistogram()
                      .Name("dilaserve_time_to_first_block_seconds")
                      .Help("Time from receiving a streamed request to sending its first committed block")
                      .Register(*registry_)
                      .Add({}, latency_buckets);
  tokens_per_step_ = &pm::BuildHistogram()
                          .Name("dilaserve_tokens_per_step")
                          .Help("Answer tokens committed per denoising step, per finished request")
                          .Register(*registry_)
                          .Add({}, tokens_per_step_buckets);
  tau_ = &pm::BuildHistogram()
              .Name("dilaserve_threshold")
              .Help("Confidence threshold tau used by finished requests")
              .Register(*registry_)
              .Add({}, tau_buckets);
  in_flight_ = &pm::BuildGauge()
                    .Name("dilaserve_http_requests_in_flight")
                    .Help("Completion requests the gateway is serving now")
                    .Register(*registry_)
                    .Add({});
  queue_depth_ = &pm::BuildGauge()
                      .Name("dilaserve_group_queue_depth")
                      .Help("Requests queued on each live TP group, as last reported to the head")
                      .Register(*registry_);
  node_up_ = &pm::BuildGauge()
                  .Name("dilaserve_node_up")
                  .Help("1 if the node is ALIVE at the head, else 0")
                  .Register(*registry_);
  cluster_in_flight_ = &pm::BuildGauge()
                            .Name("dilaserve_cluster_requests_in_flight")
                            .Help("Requests in flight in the whole cluster (all clients)")
                            .Register(*registry_)
                            .Add({});
  auto& steps = pm::BuildHistogram()
                    .Name("dilaserve_step_duration_seconds")
                    .Help("Wall time of TP group steps by kind (refresh: the step has a refresh row; reuse: only "
                          "cached rows), as the groups last reported them")
                    .Register(*registry_);
  const pm::Histogram::BucketBoundaries step_buckets(runtime::step_time_bounds_s.begin(),
                                                     runtime::step_time_bounds_s.end());
  step_refresh_ = &steps.Add({{"kind", "refresh"}}, step_buckets);
  step_reuse_ = &steps.Add({{"kind", "reuse"}}, step_buckets);
  migrations_ = &pm::BuildCounter()
                     .Name("dilaserve_migrations_total")
                     .Help("Requests the TP groups sent to another group (live migration), as last reported")
                     .Register(*registry_)
                     .Add({});
  reconfigurations_ = &pm::BuildCounter()
                           .Name("dilaserve_reconfigurations_total")
                           .Help("Completed regroups (split or merge of a node's TP groups)")
                           .Register(*registry_)
                           .Add({});
}

gateway_metrics::~gateway_metrics() = default;

namespace {

// Adds what `now` holds beyond `before` to `h`; a smaller count means the group started over
// (a new incarnation with the same name), so all of `now` is new.
void add_increment(pm::Histogram& h, const runtime::step_histogram& before, const runtime::step_histogram& now) {
  const bool restarted = now.count < before.count;
  if (!restarted && now.count == before.count) return;
  std::vector<double> inc(now.counts.size());
  for (std::size_t i = 0; i < inc.size(); ++i)
    inc[i] = static_cast<double>(restarted ? now.counts[i] : now.counts[i] - std::min(now.counts[i], before.counts[i]));
  // Per-bucket increments, the +Inf bucket last, as prometheus-cpp's buckets are kept.
  h.ObserveMultiple(inc, restarted ? now.sum_s : std::max(0.0, now.sum_s - before.sum_s));
}

}  // namespace

void gateway_metrics::count_response(const std::string& route, int status) {
  responses_->Add({{"route", route}, {"code", std::to_string(status)}}).Increment();
}

void gateway_metrics::observe_answer(const runtime::answer& a, bool had_slo, double seconds) {
  answers_->Add({{"outcome", a.ok ? "ok" : "error"}}).Increment();
  if (!a.ok) return;
  latency_->Observe(seconds);
  if (a.steps > 0) tokens_per_step_->Observe(static_cast<double>(a.tokens) / a.steps);
  tau_->Observe(a.threshold);
  moves_->Increment(a.moves);
  if (had_slo) slo_->Add({{"result", a.slo_met ? "met" : "missed"}}).Increment();
}

void gateway_metrics::observe_first_block(double seconds) { first_block_->Observe(seconds); }

void gateway_metrics::set_in_flight(int n) { in_flight_->Set(n); }

void gateway_metrics::update_cluster(const nlohmann::json& status) {
  std::lock_guard<std::mutex> lk(mu_);
  std::set<std::string> seen;
  for (const auto& g : status.value("groups", nlohmann::json::array())) {
    auto name = g.value("name", "");
    if (name.empty()) continue;
    seen.insert(name);
    auto& gauge = groups_[name];
    if (!gauge) gauge = &queue_depth_->Add({{"group", name}});
    gauge->Set(g.value("queue", 0));
  }
  std::map<std::string, group_totals> totals;
  for (const auto& g : status.value("groups", nlohmann::json::array())) {
    auto name = g.value("name", "");
    if (name.empty()) continue;
    group_totals now;
    if (g.contains("step_time_s") && g["step_time_s"].is_object()) {
      now.refresh = runtime::step_histogram::from_json(g["step_time_s"].value("refresh", nlohmann::json()));
      now.reuse = runtime::step_histogram::from_json(g["step_time_s"].value("reuse", nlohmann::json()));
    }
    now.migrations = g.value("migrations_out", uint64_t{0});
    const auto before_it = seen_groups_.find(name);
    const group_totals before = before_it == seen_groups_.end() ? group_totals{} : before_it->second;
    add_increment(*step_refresh_, before.refresh, now.refresh);
    add_increment(*step_reuse_, before.reuse, now.reuse);
    migrations_->Increment(static_cast<double>(
        now.migrations >= before.migrations ? now.migrations - before.migrations : now.migrations));
    totals[name] = now;
  }
  seen_groups_ = std::move(totals);
  if (status.contains("reconfigurer") && status["reconfigurer"].is_object()) {
    const auto regroups = status["reconfigurer"].value("regroups", uint64_t{0});
    reconfigurations_->Increment(static_cast<double>(regroups >= seen_regroups_ ? regroups - seen_regroups_ : regroups));
    seen_regroups_ = regroups;
  }
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (seen.count(it->first)) {
      ++it;
    } else {
      queue_depth_->Remove(it->second);
      it = groups_.erase(it);
    }
  }
  for (const auto& n : status.value("nodes", nlohmann::json::array())) {
    auto name = n.value("name", "");
    auto& gauge = nodes_[name];
    if (!gauge) gauge = &node_up_->Add({{"node", name}});
    gauge->Set(n.value("state", "") == "ALIVE" ? 1 : 0);
  }
  if (status.contains("requests")) cluster_in_flight_->Set(status["requests"].value("in_flight", 0));
}

std::string gateway_metrics::render() const {
  std::ostringstream os;
  pm::TextSerializer{}.Serialize(os, registry_->Collect());
  return os.str();
}

}  // namespace dls::gateway
