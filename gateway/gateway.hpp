#pragma once
// The OpenAI-compatible HTTP gateway, hosted by the head process next to its actors
// (docs/http.md). It reaches the cluster only through the head endpoint, in-process.
#include "runtime/cluster_config.hpp"
#include "runtime/messages.hpp"

#include <caf/actor_system.hpp>

#include <memory>

namespace dls::gateway {

class http_gateway {
 public:
  /// Loads the model's tokenizer and limits, binds cfg.http.host:port and starts
  /// serving. Throws std::runtime_error with a one-line reason.
  http_gateway(caf::actor_system& sys, const runtime::cluster_config& cfg, runtime::head_actor endpoint);
  /// Stops accepting, ends open streams and joins every thread.
  ~http_gateway();
  http_gateway(const http_gateway&) = delete;
  http_gateway& operator=(const http_gateway&) = delete;

  int port() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dls::gateway
