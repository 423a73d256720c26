#include "gateway/cluster_bridge.hpp"

#include <caf/all.hpp>

namespace dls::gateway {

namespace rt = dls::runtime;

namespace {

class caf_stream_call final : public stream_call {
 public:
  caf_stream_call(caf::actor_system& sys, rt::head_actor endpoint, rt::submit_spec spec)
      : self_(sys), endpoint_(std::move(endpoint)), tag_(spec.tag) {
    // Named as the client even when not streaming, so that the request can be withdrawn.
    spec.client = caf::actor_cast<caf::actor>(self_);
    self_->send(endpoint_, rt::submit_atom::value, std::move(spec));
  }
  ~caf_stream_call() override {
    if (!finished_) cancel();
  }

  event next(std::chrono::milliseconds wait) override {
    event ev;
    self_->receive(
        [&](rt::block_chunk& c) {
          ev.kind = event::chunk;
          ev.block = std::move(c);
        },
        [&](rt::answer& a) {
          ev.kind = event::answer;
          ev.result = std::move(a);
          finished_ = true;
        },
        [&](caf::error& e) {
          ev.kind = event::failure;
          ev.error = to_string(e);
          finished_ = true;
        },
        caf::after(wait) >> [] {});
    return ev;
  }

  void cancel() override {
    if (finished_) return;
    finished_ = true;
    self_->send(endpoint_, rt::cancel_atom::value, tag_);
  }

 private:
  caf::scoped_actor self_;
  rt::head_actor endpoint_;
  uint64_t tag_;
  bool finished_ = false;
};

}  // namespace

cluster_bridge::cluster_bridge(caf::actor_system& sys, rt::head_actor endpoint)
    : sys_(sys), endpoint_(std::move(endpoint)) {}

std::optional<std::string> cluster_bridge::status(std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys_};
  std::optional<std::string> out;
  self->request(endpoint_, timeout, rt::status_atom::value)
      .receive([&](std::string& text) { out = std::move(text); }, [](caf::error&) {});
  return out;
}

std::optional<std::vector<rt::actor_info>> cluster_bridge::actors(std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys_};
  std::optional<std::vector<rt::actor_info>> out;
  self->request(endpoint_, timeout, rt::actors_atom::value)
      .receive([&](std::vector<rt::actor_info>& rows) { out = std::move(rows); }, [](caf::error&) {});
  return out;
}

std::unique_ptr<stream_call> cluster_bridge::open_call(rt::submit_spec spec) {
  spec.tag = next_tag_++;
  return std::make_unique<caf_stream_call>(sys_, endpoint_, std::move(spec));
}

}  // namespace dls::gateway
