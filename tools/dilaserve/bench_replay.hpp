#pragma once
// Open-loop replay of the bench's requests against a running cluster: each request is sent at
// its arrival time whatever the answers do, and every answer is awaited (with a deadline).
#include "dilaserve/bench_workload.hpp"
#include "gpu/eval_set.hpp"
#include "runtime/client.hpp"

#include <functional>
#include <string>
#include <vector>

namespace dls::cli {

struct replay_outcome {
  bool ok = false;             // answered without error
  std::string text, error;
  double latency_s = 0;        // the cluster's: head acceptance to answer (what its SLO check uses)
  double client_latency_s = 0; // the client's: scheduled arrival to the answer's arrival here
  double first_block_s = 0;    // HTTP streaming: scheduled arrival to the first data event
  double send_lag_s = 0;       // how late the client sent it after its scheduled time
  bool slo_met = false;
  int steps = 0, tokens = 0, moves = 0;
  bool retried = false;        // HTTP: sent again after its connection failed before any response
};

struct replay_plan {
  std::vector<bench_request> requests;  // times in trace seconds
  double time_scale = 1.0;              // replay time = trace time x time_scale
  double timeout_s = 120;               // after the last arrival, for the answers still out
  std::function<void()> on_answer;      // progress
};

/// Through the CAF client path (what `dilaserve submit` does). Throws on a lost head or when
/// answers are still missing at the timeout, naming how many; `interrupted()` ends it too.
std::vector<replay_outcome> replay_caf(runtime::cluster_session& session, const replay_plan& plan,
                                       const std::vector<gpu::eval_problem>& problems);

struct http_endpoint {
  std::string host;
  int port = 0;
  std::string base_path;  // "/v1" or a prefix before it
  std::string key;        // bearer key
  std::string model;
};

/// Parses http://HOST:PORT[/PATH] (PATH defaults to /v1); throws std::invalid_argument.
http_endpoint parse_http_url(const std::string& url);

/// Through the OpenAI-compatible API, as `vllm bench serve` does: one streamed
/// POST {base}/completions per request from a pool of client threads (each with its own
/// kept-alive connection, opened one after another before the first arrival), SSE read event
/// by event. A request whose connection failed before any byte of response (a closed idle
/// connection, a full listen queue) is sent once more and marked `retried`. Throws like
/// replay_caf.
std::vector<replay_outcome> replay_http(const http_endpoint& ep, const replay_plan& plan,
                                        const std::vector<gpu::eval_problem>& problems, int connections);

}  // namespace dls::cli
