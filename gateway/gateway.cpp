#include "gateway/gateway.hpp"

#include "gateway/accept_queue.hpp"

#include "gateway/gateway_context.hpp"
#include "gateway/routes.hpp"
#include "gpu/model_config.hpp"
#include "runtime/log.hpp"

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace dls::gateway {

namespace {

// Threads beyond max_concurrent, so that over the limit a client still gets a quick
// 429, and /health and /metrics answer while every streaming slot is taken.
constexpr int spare_threads = 16;
// Idle keep-alive connections each hold a worker thread; let them go quickly.
constexpr time_t keep_alive_timeout_s = 2;

model_facts facts_for(const runtime::cluster_config& cfg) {
  model_facts f;
  f.id = std::filesystem::path(cfg.model_path).filename().string();
  f.max_seq = gpu::load_model_config(cfg.model_path + "/config.json").max_seq;
  f.engine = cfg.engine.decode;
  for (const auto& n : cfg.nodes)
    if (n.devices.kind != "cpu") f.truncates = f.scores = false;
  return f;
}

// A checkpoint without tokenizer_config.json's chat_template has none; one the template
// engine cannot run stops the gateway with the engine's message naming the construct.
std::optional<gpu::chat_template> chat_template_of(const std::string& model_dir) {
  auto path = std::filesystem::path(model_dir) / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  auto config = nlohmann::json::parse(std::ifstream(path), nullptr, false);
  if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
  return gpu::chat_template::from_checkpoint(model_dir);
}

}  // namespace

gateway_context::gateway_context(caf::actor_system& sys, const runtime::cluster_config& cfg,
                                 runtime::head_actor endpoint)
    : http(cfg.http),
      facts(facts_for(cfg)),
      tokenizer(gpu::load_tokenizer(cfg.model_path)),
      chat(chat_template_of(cfg.model_path)),
      end_of_turn(!chat                                        ? ""
                  : chat->family() == gpu::chat_family::llama3 ? "<|eot_id|>"
                  : chat->family() == gpu::chat_family::chatml ? "<|im_end|>"
                                                               : ""),
      limits(cfg.limits, cfg.engine.decode.gen_length,
             runtime::model_bounds{facts.max_seq,
                                   [this](const std::string& s) { return static_cast<int64_t>(tokenizer->encode(s).size()); }}),
      keys(cfg.http.api_keys),
      bridge(sys, std::move(endpoint)),
      view(bridge, [this](const nlohmann::json& status) { metrics.update_cluster(status); }) {}

void record_answer(gateway_context& ctx, const runtime::answer& a, bool had_slo, double seconds) {
  ctx.metrics.observe_answer(a, had_slo, seconds);
  if (a.ok) ctx.view.note_answer();
  auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  ctx.recent.add(now.count(), a.ok, seconds * 1000, had_slo, a.slo_met);
}

concurrency_slot::concurrency_slot(gateway_context& ctx) : ctx_(ctx) {
  int now = ++ctx_.in_flight;
  granted_ = now <= ctx_.http.max_concurrent;
  if (granted_) ctx_.metrics.set_in_flight(now);
  else --ctx_.in_flight;
}

concurrency_slot::~concurrency_slot() {
  if (granted_) ctx_.metrics.set_in_flight(--ctx_.in_flight);
}

struct http_gateway::impl {
  std::unique_ptr<gateway_context> ctx;
  httplib::Server svr;
  std::thread listener;
  int port = 0;
};

http_gateway::http_gateway(caf::actor_system& sys, const runtime::cluster_config& cfg, runtime::head_actor endpoint)
    : impl_(std::make_unique<impl>()) {
  try {
    impl_->ctx = std::make_unique<gateway_context>(sys, cfg, std::move(endpoint));
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("the HTTP gateway cannot load the model's tokenizer, limits or chat template: ") +
                             e.what());
  }
  auto& svr = impl_->svr;
  auto threads = static_cast<std::size_t>(cfg.http.max_concurrent + spare_threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(cfg.http.max_body_bytes);
  svr.set_keep_alive_timeout(keep_alive_timeout_s);
  // Headers and body leave in separate writes; without this, Nagle's algorithm holds the
  // second until the client's delayed ACK (tens of ms per request).
  svr.set_tcp_nodelay(true);
  add_routes(svr, *impl_->ctx);
  const auto& host = cfg.http.host;
  if (cfg.http.port == 0) {
    impl_->port = svr.bind_to_any_port(host);
  } else {
    impl_->port = svr.bind_to_port(host, cfg.http.port) ? cfg.http.port : -1;
  }
  if (impl_->port <= 0)
    throw std::runtime_error("the HTTP gateway cannot listen on " + host + ":" + std::to_string(cfg.http.port));
  // Room for every client the gateway serves at once (http.max_concurrent) to connect in one
  // burst, and as many again arriving while those are served.
  if (auto why = deepen_accept_queue(impl_->port, 2 * cfg.http.max_concurrent); !why.empty())
    runtime::log_line("http", "warning: the accept queue stays at cpp-httplib's 5 (" + why + "); a burst of clients may retry");
  impl_->listener = std::thread([this] { impl_->svr.listen_after_bind(); });
}

http_gateway::~http_gateway() {
  impl_->ctx->stopping = true;
  impl_->svr.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

int http_gateway::port() const { return impl_->port; }

}  // namespace dls::gateway
