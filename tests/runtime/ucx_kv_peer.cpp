// The source process of the UCX tests: decodes a real request to the middle of a block and
// sends its canvas and KV cache to the test process over UCX, or sends one large buffer and
// is killed by the test while it travels.
//   ucx_kv_peer move-kv TLS PEER_HEX MODEL --ready-fd N   ready line: the unmoved run's tokens
//   ucx_kv_peer send-big TLS PEER_HEX BYTES --ready-fd N  says hello (transfer 2, its address),
//     waits for the answer (transfer 5), posts the send; ready line once it is posted
//   ucx_kv_peer send-and-stop TLS PEER_HEX BYTES --ready-fd N  sends 16 buffers of BYTES
//     (transfers 10-25), each told done, then stops its transport and exits at once
#include "ucx_test_support.hpp"

#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"
#include "runtime/process.hpp"
#include "runtime/ucx_transport.hpp"

#include <future>
#include <iostream>
#include <string>
#include <vector>

namespace rt = dls::runtime;
namespace gpu = dls::gpu;

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int ready_fd = -1;
  if (args.size() >= 2 && args[args.size() - 2] == "--ready-fd") {
    ready_fd = std::stoi(args.back());
    args.resize(args.size() - 2);
  }
  if (args.size() != 4) {
    std::cerr << "usage: ucx_kv_peer move-kv|send-big|send-and-stop TLS PEER_HEX MODEL|BYTES --ready-fd N\n";
    return 2;
  }
  try {
    rt::ucx_config cfg;
    cfg.tls = args[1];
    cfg.net_devices = "lo";
    rt::ucx_transport t(cfg, dls::test::test_seal_key());
    const std::string peer = dls::test::from_hex(args[2]);
    if (args[0] == "send-and-stop") {
      // Every send is posted at once and reported done when its buffer may be reused, which
      // for an eager one is before it has arrived: the last ones are still on their way when
      // the transport below stops.
      std::vector<std::future<std::string>> done;
      std::vector<std::shared_ptr<std::promise<std::string>>> promises;
      for (uint64_t id = 10; id < 26; ++id) {
        auto p = std::make_shared<std::promise<std::string>>();
        done.push_back(p->get_future());
        t.send(peer, id, std::make_shared<const std::string>(std::stoull(args[3]), static_cast<char>('a' + id % 26)),
               rt::ucx_transport::clock::now() + std::chrono::milliseconds(cfg.timeout_ms),
               [p](const std::string& e) { p->set_value(e); });
      }
      for (auto& f : done)
        if (auto e = f.get(); !e.empty()) throw std::runtime_error(e);
      rt::signal_ready(ready_fd, "sent");
      return 0;  // the transport stops here
    }
    if (args[0] == "send-big") {
      // First contact before the kill: UCX 1.13 aborts a receiver whose wireup reply is still
      // connecting when the sender dies (docs/runtime.md, "Data plane"). The receiver
      // answers this hello over an endpoint of its own, so its reply has been sent by then
      // and the kill below lands in the data transfer this test is about.
      if (auto e = t.send_wait(peer, 2, std::make_shared<const std::string>(t.address())); !e.empty())
        throw std::runtime_error(e);
      if (auto go = t.receive_wait(5); !go.error.empty()) throw std::runtime_error(go.error);
      auto buf = std::make_shared<const std::string>(std::stoull(args[3]), 'x');
      std::promise<std::string> sent;
      t.send(peer, 3, buf, rt::ucx_transport::clock::now() + std::chrono::milliseconds(cfg.timeout_ms),
             [&](const std::string& e) { sent.set_value(e); });
      rt::signal_ready(ready_fd, "sending");
      sent.get_future().get();  // the test kills this process before this returns
      return 0;
    }
    auto model = gpu::load_model(args[3]);
    auto tok = gpu::load_tokenizer(args[3]);
    gpu::decode_params p;
    p.gen_length = 32;
    p.block_length = 8;
    p.threshold = 0.99;  // few commits per step, so the first block takes several steps
    p.cache = gpu::cache_mode::dual;
    gpu::engine e(gpu::make_cpu_backend(model));
    auto s = e.admit(gpu::canvas::start(tok->encode("A8341.+962.....="), p, model->config.mask_id, model->config.eos_id));
    // Past the first block's refresh: the KV cache is needed to go on.
    while (!s.c.finished && s.c.at_refresh_boundary()) e.step({&s});
    if (s.c.finished) throw std::runtime_error("the request finished before it was mid-block");
    auto canvas = std::make_shared<const std::string>(s.c.to_bytes());
    auto kv = std::make_shared<const std::string>(s.cache->export_bytes());
    for (auto [id, bytes] : {std::pair{uint64_t{1}, canvas}, std::pair{uint64_t{2}, kv}}) {
      const std::string error = t.send_wait(peer, id, bytes);
      if (!error.empty()) throw std::runtime_error(error);
    }
    while (!s.c.finished) e.step({&s});
    std::string line = "steps " + std::to_string(s.c.steps) + " kv " + std::to_string(kv->size()) + " ids";
    for (auto id : s.c.ids) line += " " + std::to_string(id);
    rt::signal_ready(ready_fd, line);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ucx_kv_peer: " << e.what() << "\n";
    rt::signal_ready(ready_fd, std::string("error: ") + e.what());
    return 1;
  }
}
