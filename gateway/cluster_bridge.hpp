#pragma once
// The gateway's side of the actor system: each HTTP worker thread talks to the head
// endpoint through its own blocking (scoped) actor, in the head's own actor system.
// Every wait has a deadline.
#include "runtime/messages.hpp"

#include <caf/actor_system.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace dls::gateway {

/// One submitted request: chunks as the cluster commits blocks (when streamed), then its answer.
class stream_call {
 public:
  struct event {
    enum kind_t { idle, chunk, answer, failure } kind = idle;
    runtime::block_chunk block;
    runtime::answer result;
    std::string error;  // failure: the actor system's reason
  };
  virtual ~stream_call() = default;
  /// Waits at most `wait` for the next event (idle when none came).
  virtual event next(std::chrono::milliseconds wait) = 0;
  /// Withdraws the request from the cluster (the client went away). Idempotent.
  virtual void cancel() = 0;
};

class cluster_bridge {
 public:
  cluster_bridge(caf::actor_system& sys, runtime::head_actor endpoint);

  /// The head's status JSON, or nothing if it did not answer within `timeout`.
  std::optional<std::string> status(std::chrono::milliseconds timeout);
  /// The head's actor directory, or nothing if it did not answer within `timeout`.
  std::optional<std::vector<runtime::actor_info>> actors(std::chrono::milliseconds timeout);

  /// Submits a request (streamed when spec.stream is set); the caller drives it with
  /// next() until its answer. Destroyed before that, it withdraws the request.
  std::unique_ptr<stream_call> open_call(runtime::submit_spec spec);

 private:
  caf::actor_system& sys_;
  runtime::head_actor endpoint_;
  std::atomic<uint64_t> next_tag_{1};
};

}  // namespace dls::gateway
