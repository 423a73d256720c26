// `dilaserve bench-migration`: the UCX data plane between two processes on this host, per
// transport: buffer bandwidth against ucx_perftest (run as a subprocess pair), the downtime of
// moving a real canvas (transfer, import and the first step at the destination), and, on the
// d_model 512 bench model, a mid-block move by KV transfer against a rebuild by one refresh at
// the destination. The same binary, started with --peer-of, is the destination process; both
// sides walk the same plan, so transfer ids match without a control channel.
#include "dilaserve/bench_live_migration.hpp"
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "dilaserve/validators.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"
#include "runtime/process.hpp"
#include "runtime/ucx_seal.hpp"
#include "runtime/ucx_transport.hpp"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <signal.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace dls::cli {
namespace {

namespace rt = dls::runtime;
using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

struct options {
  std::vector<std::string> tls{"tcp", "shm,cma,tcp"};
  std::vector<bool> encrypt{true};  // ucx.encrypt of both processes; each value is measured in turn
  std::vector<std::size_t> sizes{64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20, 256u << 20};
  std::vector<int> lengths{512, 1024};
  std::string model = "models/tiny-llada";
  int reps = 5;
  bool json_out = false;
  std::string profile;  // a `dilaserve profile` file to store the measured transfer figures in
  bool links_only = false;
  std::size_t part_bytes = rt::ucx_config{}.part_bytes;  // ucx.part_bytes of both processes
  std::size_t rndv_threshold_bytes = rt::ucx_config{}.rndv_threshold_bytes;  // ucx.rndv_threshold_bytes of both
  std::size_t tcp_segment_bytes = rt::ucx_config{}.tcp_segment_bytes;  // ucx.tcp_segment_bytes of both
  int window = 0;  // transfers in flight per bandwidth round; 0: the whole round at once
  bool live = true;  // also through the real migration path on a two-node cluster
  int live_canvas_moves = 20;
  int live_midblock_moves = 3;  // latency and bandwidth only (what `up` stores in the profile it measures)
  std::string peer_of;  // internal: run as the destination of the parent at this hex address
  std::string peer_tls;
  bool peer_encrypt = true;
  std::string peer_key;  // internal: the bench's own data-plane key, hex (made for this run only)
};

// Bytes moved per bandwidth round: enough that the per-round acknowledgement is noise
// (<1 % at 1 GB/s) and small enough that 7 sizes x reps stay within seconds.
constexpr std::size_t round_bytes = 64u << 20;
constexpr int block = 32;          // the bench model's block, as bench-engine's default
// The largest buffer a bandwidth round sends: 4x the largest KV cache measured (256 MiB); the
// sender holds one and the receiver a round's worth, so larger ones fail for memory, not speed.
constexpr std::size_t largest_size = std::size_t{1} << 30;
constexpr int ucx_timeout_ms = 60000;  // a 256 MB round at 25 MB/s would still arrive

std::string to_hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string o;
  for (unsigned char c : b) o += {d[c >> 4], d[c & 15]};
  return o;
}
std::string from_hex(const std::string& h) {
  std::string o;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) o += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return o;
}

int transfers_per_round(std::size_t size) { return static_cast<int>(std::max<std::size_t>(1, round_bytes / size)); }

rt::ucx_config ucx_for(const std::string& tls, bool encrypt, const options& o) {
  rt::ucx_config c;
  c.tls = tls;
  c.encrypt = encrypt;
  c.part_bytes = o.part_bytes;
  c.rndv_threshold_bytes = o.rndv_threshold_bytes;
  c.tcp_segment_bytes = o.tcp_segment_bytes;
  c.net_devices = "lo";
  c.timeout_ms = ucx_timeout_ms;
  return c;
}

gpu::model_config bench_config() {  // bench-engine's d_model 512 model
  gpu::model_config c;
  c.d_model = 512;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 8;
  c.mlp_hidden = ((8 * c.d_model / 3 + 31) / 32) * 32;
  c.vocab_size = 8192;
  c.mask_id = 1;
  c.eos_id = 0;
  c.max_seq = 8192;
  return c;
}

gpu::canvas length_canvas(const gpu::model_config& c, int length) {
  gpu::decode_params p;
  p.gen_length = block;
  p.block_length = block;
  p.threshold = 0.9;
  p.cache = gpu::cache_mode::dual;
  std::vector<int32_t> prompt(static_cast<std::size_t>(length - block));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(2 + (i * 31) % (c.vocab_size - 2));
  return gpu::canvas::start(prompt, p, c.mask_id, c.eos_id);
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

std::shared_ptr<const std::string> text(const std::string& s) { return std::make_shared<const std::string>(s); }

// Both sides walk this plan in the same order; `next` numbers the transfers.
struct plan_walker {
  uint64_t next = 1;
  uint64_t id() { return next++; }
};

void must(const std::string& error) {
  if (!error.empty()) throw std::runtime_error(error);
}

// -- the destination process ----------------------------------------------------------------

// The receiving side of one bandwidth round: every receive posted at once, as the live path
// posts its receives, so the round does not wait on this thread between transfers.
void receive_round(rt::ucx_transport& t, plan_walker& w, int n) {
  struct state {
    std::atomic<int> left;
    std::string failure;  // the first error, written on the progress thread
    std::promise<void> done;
  };
  auto st = std::make_shared<state>();
  st->left = n;
  auto all = st->done.get_future();
  const auto deadline = clock_type::now() + std::chrono::milliseconds(ucx_timeout_ms);
  for (int i = 0; i < n; ++i)
    t.receive(w.id(), deadline, [st](const std::string& e, rt::ucx_payload) {  // on the progress thread
      if (!e.empty() && st->failure.empty()) st->failure = e;
      if (--st->left == 0) st->done.set_value();
    });
  all.get();
  must(st->failure);
}

int run_peer(const options& o, int ready_fd) {
  rt::ucx_transport t(ucx_for(o.peer_tls, o.peer_encrypt, o), from_hex(o.peer_key));
  const std::string parent = from_hex(o.peer_of);
  rt::signal_ready(ready_fd, to_hex(t.address()));
  plan_walker w;
  auto ack = [&](uint64_t id, const std::string& what) { must(t.send_wait(parent, id, text(what))); };
  auto take = [&](uint64_t id) {
    auto r = t.receive_wait(id);
    must(r.error);
    return r;
  };
  // Latency: ping-pong of a small buffer.
  for (int r = 0; r < o.reps + 1; ++r) {
    const auto id = w.id();
    take(id);
    ack(id, "pong");
  }
  for (auto size : o.sizes) {
    for (int r = 0; r < o.reps + 1; ++r) {
      receive_round(t, w, transfers_per_round(size));
      const auto id = w.id();
      take(id);
      ack(id, "ack");
    }
  }
  if (o.links_only) return 0;
  // Canvas move: import the canvas and take its first step here.
  auto tiny = gpu::load_model(o.model);
  gpu::engine tiny_engine(gpu::make_cpu_backend(tiny));
  for (int r = 0; r < o.reps + 1; ++r) {
    const auto id = w.id();
    auto got = take(id);
    const auto t0 = clock_type::now();
    auto slot = tiny_engine.admit(gpu::canvas::from_bytes(std::string(got.payload.view())));
    tiny_engine.step({&slot});
    ack(id, std::to_string(ms_since(t0)));
  }
  // Mid-block: KV transfer + import, then the refresh that would rebuild it instead.
  auto big = gpu::make_random_model(bench_config(), 5);
  gpu::engine e(gpu::make_cpu_backend(big));
  for (int L : o.lengths) {
    for (int r = 0; r < o.reps + 1; ++r) {
      const auto cid = w.id(), kid = w.id();
      auto canvas = take(cid);
      auto kv = take(kid);
      auto slot = e.admit(gpu::canvas::from_bytes(std::string(canvas.payload.view())));
      slot.cache->import_bytes(kv.payload.view());
      ack(kid, "imported");
    }
    std::vector<double> refresh;
    for (int r = 0; r < o.reps + 1; ++r) {
      auto slot = e.admit(length_canvas(bench_config(), L));
      const auto t0 = clock_type::now();
      e.step({&slot});
      if (r) refresh.push_back(ms_since(t0));
    }
    ack(w.id(), std::to_string(median(refresh)));
  }
  return 0;
}

// -- ucx_perftest as the reference ----------------------------------------------------------

bool port_listening(uint16_t port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state;
    f >> sl >> local >> remote >> state;
    if (state == "0A" && local.size() >= 5 && local.substr(local.size() - 5) == want) return true;
  }
  return false;
}

uint16_t free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// How `ucx_perftest` runs: as it does by default (busy polling, no peer-failure handling, UCX's
// tcp segment), or configured as our transport is (sleeping between events, our tcp segment,
// and peer-failure handling where our endpoints ask for it: with it UCX 1.13 moves rendezvous
// data over tcp in segments instead of one zero-copy put).
enum class perftest_mode { as_default, like_ours };

// Runs `ucx_perftest -t ucp_am_bw` server and client on 127.0.0.1 with UCX_TLS=tls; returns
// the client's overall bandwidth in bytes/s (perftest reports MB/s of 2^20 bytes).
double perftest_bytes_per_s(const std::string& tls, std::size_t size, perftest_mode mode, std::size_t tcp_segment_bytes) {
  const uint16_t port = free_port();
  const int iters = std::max(transfers_per_round(size) * 4, 8);
  std::vector<std::string> vars{"UCX_TLS=" + tls, "UCX_NET_DEVICES=lo"};
  if (mode == perftest_mode::like_ours && tcp_segment_bytes)
    for (const char* k : {"UCX_TCP_TX_SEG_SIZE=", "UCX_TCP_RX_SEG_SIZE="}) vars.push_back(k + std::to_string(tcp_segment_bytes));
  std::string env;
  for (const auto& v : vars) env += v + " ";
  std::vector<std::string> flags;  // the server takes them too
  if (mode == perftest_mode::like_ours) {
    flags = {"-E", "sleep"};
    if (rt::ucx_handles_peer_errors(tls)) flags.push_back("-e");
  }
  std::string joined_flags;
  for (const auto& f : flags) joined_flags += " " + f;
  // Everything the server's exec needs is built before fork: the child of a threaded process
  // may not allocate.
  const std::string port_text = std::to_string(port);
  std::vector<std::string> words{"ucx_perftest", "-p", port_text};
  words.insert(words.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  for (char** e = environ; *e; ++e) {
    const std::string_view entry(*e);
    const bool ours = std::any_of(vars.begin(), vars.end(), [&](const std::string& v) {
      return entry.substr(0, v.find('=') + 1) == std::string_view(v).substr(0, v.find('=') + 1);
    });
    if (!ours) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  pid_t server = ::fork();
  if (server == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::execvpe("ucx_perftest", argv.data(), envp.data());
    ::_exit(127);
  }
  // The server is ready when its port listens (a probe connection would be taken as the client).
  const auto until = clock_type::now() + std::chrono::seconds(10);
  while (!port_listening(port)) {
    int st = 0;
    if (::waitpid(server, &st, WNOHANG) == server) throw std::runtime_error("ucx_perftest server exited (is ucx-utils installed?)");
    if (clock_type::now() > until) {
      ::kill(server, SIGKILL);
      ::waitpid(server, nullptr, 0);
      throw std::runtime_error("ucx_perftest server did not listen within 10 s");
    }
    ::usleep(2000);  // polling a file of the kernel's: no event says "listening"
  }
  const std::string cmd = env + "timeout 120 ucx_perftest 127.0.0.1 -p " + std::to_string(port) +
                          " -t ucp_am_bw" + joined_flags + " -s " + std::to_string(size) + " -n " + std::to_string(iters) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = p ? ::pclose(p) : -1;
  int st = 0;
  if (::waitpid(server, &st, WNOHANG) != server) {
    ::kill(server, SIGKILL);
    ::waitpid(server, nullptr, 0);
  }
  const auto at = out.find("Final:");
  if (rc != 0 || at == std::string::npos)
    throw std::runtime_error("ucx_perftest with UCX_TLS=" + tls + " failed: " + out.substr(0, 300));
  std::istringstream f(out.substr(at + 6));
  double iterations, p50, avg_lat, overall_lat, avg_bw, overall_bw;
  f >> iterations >> p50 >> avg_lat >> overall_lat >> avg_bw >> overall_bw;
  return overall_bw * 1048576.0;
}

// -- the source process ---------------------------------------------------------------------

// One bandwidth round: `ids` sent in order, at most `window` in flight, the next posted as
// each one is delivered (from the transport's progress thread). The callbacks share the
// round's state, so it outlives the last of them. Returns "" or the first error.
struct send_round {
  rt::ucx_transport& t;
  std::string peer;
  std::shared_ptr<const std::string> buf;
  std::vector<uint64_t> ids;
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> left;
  std::string failure;  // written on the progress thread, read after `done`
  std::promise<void> done;

  send_round(rt::ucx_transport& t, std::string peer, std::shared_ptr<const std::string> buf, std::vector<uint64_t> ids)
      : t(t), peer(std::move(peer)), buf(std::move(buf)), ids(std::move(ids)), left(this->ids.size()) {}

  static std::string run(std::shared_ptr<send_round> r, std::size_t window) {
    auto all_done = r->done.get_future();
    for (std::size_t i = 0; i < std::min(window, r->ids.size()); ++i) post_next(r);
    all_done.get();
    return r->failure;
  }

  static void post_next(const std::shared_ptr<send_round>& r) {
    const std::size_t k = r->next++;
    if (k >= r->ids.size()) return;
    r->t.send(r->peer, r->ids[k], r->buf, clock_type::now() + std::chrono::milliseconds(ucx_timeout_ms),
              [r](const std::string& e) {  // on the progress thread, one at a time
                if (!e.empty() && r->failure.empty()) r->failure = e;
                post_next(r);
                if (--r->left == 0) r->done.set_value();
              });
  }
};

json run_transport(const options& o, const std::string& tls, bool encrypt) {
  const std::string key = rt::make_seal_key();
  rt::ucx_transport t(ucx_for(tls, encrypt, o), key);
  auto joined = [](const auto& xs) {
    std::string s;
    for (auto x : xs) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
  };
  std::vector<std::string> argv{rt::self_executable(), "bench-migration", "--peer-of", to_hex(t.address()),
                                "--peer-tls", tls, "--peer-encrypt", encrypt ? "true" : "false",
                                "--peer-key", to_hex(key), "--model", o.model, "--reps", std::to_string(o.reps),
                                "--sizes", joined(o.sizes), "--lengths", joined(o.lengths),
                                "--part-bytes", std::to_string(o.part_bytes),
                                "--rndv-threshold-bytes", std::to_string(o.rndv_threshold_bytes),
                                "--tcp-segment-bytes", std::to_string(o.tcp_segment_bytes)};
  if (o.links_only) argv.push_back("--links-only");
  auto child = rt::spawn_background(argv, "/tmp/dilaserve-bench-migration-" + std::to_string(::getpid()) + ".log");
  const std::string peer = from_hex(rt::wait_ready(child, 60000));
  plan_walker w;
  auto answer = [&](uint64_t id) {
    auto r = t.receive_wait(id);
    must(r.error);
    return std::string(r.payload.view());
  };
  json out{{"tls", tls}, {"encrypt", encrypt}, {"lanes", t.describe_lanes(peer)}, {"window", o.window}};
  {
    double load[1] = {0};
    if (::getloadavg(load, 1) == 1) out["load_average"] = load[0];  // this benchmark shares the machine
  }
  std::vector<double> rtt;
  for (int r = 0; r < o.reps + 1; ++r) {
    const auto id = w.id();
    const auto t0 = clock_type::now();
    must(t.send_wait(peer, id, text("ping")));
    answer(id);
    if (r) rtt.push_back(ms_since(t0));
  }
  const double latency_s = median(rtt) / 2e3;
  out["latency_us"] = latency_s * 1e6;
  out["sizes"] = json::array();
  std::vector<double> kv_size_bw;  // our bandwidth at the sizes a KV cache has (>= 1 MB)
  for (auto size : o.sizes) {
    auto buf = std::make_shared<const std::string>(size, 'b');
    std::vector<double> bw;
    for (int r = 0; r < o.reps + 1; ++r) {
      const int n = transfers_per_round(size);
      const auto t0 = clock_type::now();
      std::vector<uint64_t> ids;
      for (int i = 0; i < n; ++i) ids.push_back(w.id());
      must(send_round::run(std::make_shared<send_round>(t, peer, buf, std::move(ids)),
                           static_cast<std::size_t>(o.window > 0 ? o.window : n)));
      const auto id = w.id();
      must(t.send_wait(peer, id, text("done")));
      answer(id);
      if (r) bw.push_back(static_cast<double>(size) * n / (ms_since(t0) / 1e3));
    }
    const double ours = median(bw);
    std::vector<double> refs, alike;
    if (!o.links_only)
      for (int r = 0; r < o.reps; ++r) {
        refs.push_back(perftest_bytes_per_s(tls, size, perftest_mode::as_default, o.tcp_segment_bytes));
        alike.push_back(perftest_bytes_per_s(tls, size, perftest_mode::like_ours, o.tcp_segment_bytes));
      }
    const double ref = refs.empty() ? 0.0 : median(refs);
    const double ref_alike = alike.empty() ? 0.0 : median(alike);
    if (size >= (1u << 20)) kv_size_bw.push_back(ours);
    out["sizes"].push_back({{"bytes", size},
                            {"ours_gbps", ours * 8 / 1e9},
                            {"perftest_gbps", ref * 8 / 1e9},
                            {"ratio", ref > 0 ? ours / ref : 0},
                            {"perftest_like_ours_gbps", ref_alike * 8 / 1e9},
                            {"ratio_like_ours", ref_alike > 0 ? ours / ref_alike : 0}});
    if (!o.json_out && refs.empty())  // --links-only: no reference run
      std::printf("  %-12s %10zu B  ours %8.3f Gb/s\n", tls.c_str(), size, ours * 8 / 1e9);
    else if (!o.json_out)
      std::printf("  %-12s %10zu B  ours %8.3f Gb/s  ucx_perftest %8.3f Gb/s (%.0f %%), configured as ours %8.3f Gb/s (%.0f %%)\n",
                  tls.c_str(), size, ours * 8 / 1e9, ref * 8 / 1e9, ref > 0 ? 100 * ours / ref : 0.0,
                  ref_alike * 8 / 1e9, ref_alike > 0 ? 100 * ours / ref_alike : 0.0);
  }
  out["bytes_per_s"] = kv_size_bw.empty() ? 0.0 : median(kv_size_bw);
  out["latency_s"] = latency_s;
  if (o.links_only) {
    if (!rt::wait_exit(child.pid, 30000)) ::kill(child.pid, SIGKILL);
    return out;
  }
  // Canvas move: stop at the source (its last step done) -> first step at the destination.
  auto tiny = gpu::load_model(o.model);
  auto tok = gpu::load_tokenizer(o.model);
  gpu::engine src(gpu::make_cpu_backend(tiny));
  std::vector<double> move;
  for (int r = 0; r < o.reps + 1; ++r) {
    gpu::decode_params p;
    const auto start = gpu::canvas::start(tok->encode("A8341.+962.....="), p, tiny->config.mask_id, tiny->config.eos_id);
    auto slot = src.admit(start);
    src.step({&slot});
    while (!slot.c.finished && !slot.c.at_refresh_boundary()) src.step({&slot});
    if (slot.c.finished) slot = src.admit(start);  // answered within one block: move it before its first step
    const auto id = w.id();
    const auto t0 = clock_type::now();
    must(t.send_wait(peer, id, text(slot.c.to_bytes())));
    const double step_ms = std::stod(answer(id));
    // The acknowledgement's return trip is part of the time; its one-way latency is subtracted.
    if (r) move.push_back(ms_since(t0) - step_ms - latency_s * 1e3);
  }
  std::sort(move.begin(), move.end());
  out["canvas_move_ms"] = {{"p50", median(move)}, {"p99", move.back()}};
  // Mid-block on the bench model.
  auto big = gpu::make_random_model(bench_config(), 5);
  gpu::engine e(gpu::make_cpu_backend(big));
  out["midblock"] = json::array();
  for (int L : o.lengths) {
    std::vector<double> transfer;
    std::size_t kv_bytes = 0;
    for (int r = 0; r < o.reps + 1; ++r) {
      auto slot = e.admit(length_canvas(bench_config(), L));
      e.step({&slot});  // the block's refresh: now mid-block, the cache is needed
      const auto cid = w.id(), kid = w.id();
      const auto t0 = clock_type::now();
      auto kv = std::make_shared<const std::string>(slot.cache->export_bytes());
      kv_bytes = kv->size();
      must(t.send_wait(peer, cid, text(slot.c.to_bytes())));
      must(t.send_wait(peer, kid, kv));
      answer(kid);
      if (r) transfer.push_back(ms_since(t0) - latency_s * 1e3);
    }
    const double refresh_ms = std::stod(answer(w.id()));
    out["midblock"].push_back(
        {{"L", L}, {"kv_bytes", kv_bytes}, {"transfer_ms", median(transfer)}, {"recompute_ms", refresh_ms}});
  }
  if (!rt::wait_exit(child.pid, 30000)) ::kill(child.pid, SIGKILL);
  return out;
}

// Where transfer and recompute take equal time, with recompute linear in L through the
// measured points and transfer = latency + bytes / bandwidth (bytes linear in L).
json crossover(const json& mid, double bytes_per_s, double latency_s) {
  if (mid.size() < 2 || bytes_per_s <= 0) return nullptr;
  const double l0 = mid[0]["L"], l1 = mid[1]["L"];
  const double r0 = mid[0]["recompute_ms"], r1 = mid[1]["recompute_ms"];
  const double b0 = mid[0]["kv_bytes"], b1 = mid[1]["kv_bytes"];
  const double rs = (r1 - r0) / (l1 - l0), bs = (b1 - b0) / (l1 - l0);  // per token
  const double ts = bs / bytes_per_s * 1e3;                              // transfer ms per token
  const double ri = r0 - rs * l0, bi = b0 - bs * l0, ti = latency_s * 1e3 + bi / bytes_per_s * 1e3;
  if (rs == ts) return nullptr;
  const double L = (ti - ri) / (rs - ts);
  return {{"L", L}, {"kv_bytes", bi + bs * L},
          {"meaning", L > 0 ? (ts < rs ? "transfer is faster above this L" : "transfer is faster below this L")
                            : (ts < rs ? "transfer is faster at every L" : "recompute is faster at every L")}};
}

void store_in_profile(const std::string& path, const json& transports) {
  YAML::Node root = YAML::LoadFile(path);
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto& t : transports) {
    YAML::Node n;
    n["tls"] = t["tls"].get<std::string>();
    n["bytes_per_s"] = t["bytes_per_s"].get<double>();
    n["latency_s"] = t["latency_s"].get<double>();
    list.push_back(n);
  }
  root["transfer"] = list;
  std::ofstream out(path);
  out << root << "\n";
  if (!out) throw std::runtime_error("cannot write " + path);
}

int run(const options& o) {
  json all{{"transports", json::array()}};
  for (const auto& tls : o.tls)
    for (const bool encrypt : o.encrypt) {
      if (!o.json_out) std::printf("transport %s, %s\n", tls.c_str(), encrypt ? "sealed" : "in the clear");
      all["transports"].push_back(run_transport(o, tls, encrypt));
      if (o.live && !o.links_only) {
        live_migration_options l;
        l.tls = tls;
        l.encrypt = encrypt;
        l.model = o.model;
        l.lengths = o.lengths;
        l.canvas_moves = o.live_canvas_moves;
        l.midblock_moves = o.live_midblock_moves;
        l.work_dir = (std::filesystem::temp_directory_path() / ("dilaserve-bench-migration-" + std::to_string(::getpid())))
                         .string();
        all["transports"].back()["live"] = live_migration(l);
        std::filesystem::remove_all(l.work_dir);
      }
    }
  if (o.links_only) {
    if (!o.profile.empty()) store_in_profile(o.profile, all["transports"]);
    if (o.json_out) std::cout << all.dump() << "\n";
    for (const auto& t : all["transports"])
      if (!o.json_out)
        std::printf("%s, %s: latency %.1f us, %.3f GB/s at >= 1 MB\n", t["tls"].get<std::string>().c_str(),
                    t["encrypt"].get<bool>() ? "sealed" : "in the clear", t["latency_us"].get<double>(),
                    t["bytes_per_s"].get<double>() / 1e9);
    return 0;
  }
  // The headline figures come from the fastest transport measured.
  const json* best = &all["transports"][0];
  for (const auto& t : all["transports"])
    if (t["canvas_move_ms"]["p50"].get<double>() < (*best)["canvas_move_ms"]["p50"].get<double>()) best = &t;
  all["canvas_move_ms"] = (*best)["canvas_move_ms"];
  all["midblock"] = (*best)["midblock"];
  all["midblock_tls"] = (*best)["tls"];
  all["crossover"] = crossover((*best)["midblock"], (*best)["bytes_per_s"], (*best)["latency_s"]);
  if (best->contains("live")) all["live"] = (*best)["live"];
  if (!o.profile.empty()) store_in_profile(o.profile, all["transports"]);
  if (o.json_out) {
    std::cout << all.dump() << "\n";
    return 0;
  }
  for (const auto& t : all["transports"]) {
    std::printf("%s, %s: latency %.1f us, canvas move p50 %.3f ms p99 %.3f ms\n", t["tls"].get<std::string>().c_str(),
                t["encrypt"].get<bool>() ? "sealed" : "in the clear", t["latency_us"].get<double>(), t["canvas_move_ms"]["p50"].get<double>(),
                t["canvas_move_ms"]["p99"].get<double>());
    for (const auto& m : t["midblock"])
      std::printf("  mid-block L %d (KV %zu B): transfer %.2f ms, recompute (one refresh) %.2f ms\n", m["L"].get<int>(),
                  m["kv_bytes"].get<std::size_t>(), m["transfer_ms"].get<double>(), m["recompute_ms"].get<double>());
  }
  for (const auto& t : all["transports"]) {
    if (!t.contains("live")) continue;
    const auto& l = t["live"];
    std::printf("%s, %s, live (two node processes, `migrate` orders): canvas move %s ms to the end of the first step "
                "there, %s ms to its start\n",
                t["tls"].get<std::string>().c_str(), t["encrypt"].get<bool>() ? "sealed" : "in the clear", l["canvas_move_ms"].dump().c_str(),
                l.value("canvas_resume_ms", json()).dump().c_str());
    for (const auto& m : l["midblock"])
      std::printf("  live mid-block L %d: transfer %s, recompute %s\n", m["L"].get<int>(),
                  m.value("transfer_ms", json()).dump().c_str(), m.value("recompute_ms", json()).dump().c_str());
    std::printf("  the live policy's crossover: %s\n", l.value("policy_crossover", json()).dump().c_str());
  }
  std::cout << "crossover (" << all["midblock_tls"].get<std::string>() << "): " << all["crossover"].dump() << "\n";
  return 0;
}

register_command reg{"bench-migration", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-migration", "benchmark the UCX data plane: bandwidth vs ucx_perftest, canvas and KV moves");
  auto o = std::make_shared<options>();
  auto ready_fd = std::make_shared<int>(-1);
  sub->add_option("--tls", o->tls, "UCX_TLS values to compare, ';'-separated")->delimiter(';');
  sub->add_option("--encrypt", o->encrypt,
                  "ucx.encrypt of both processes: true (parts sealed with AES-256-GCM, as a cluster runs by "
                  "default), false (XXH3 checksums only), or true,false to measure both in turn")
      ->delimiter(',');
  sub->add_option("--sizes", o->sizes, "buffer sizes in bytes")->delimiter(',');
  sub->add_option("--lengths", o->lengths, "canvas lengths of the mid-block comparison")->delimiter(',');
  sub->add_option("--model", o->model, "model of the canvas move");
  sub->add_option("--part-bytes", o->part_bytes,
                  "ucx.part_bytes of both processes (0: every buffer whole, its checksum before and after the transfer)");
  sub->add_option("--rndv-threshold-bytes", o->rndv_threshold_bytes,
                  "ucx.rndv_threshold_bytes of both processes (larger buffers go by rendezvous, the rest eagerly)");
  sub->add_option("--tcp-segment-bytes", o->tcp_segment_bytes,
                  "ucx.tcp_segment_bytes of both processes, and of ucx_perftest configured as ours (0: UCX's own)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{64} << 20));
  sub->add_option("--reps", o->reps, "timed repetitions (medians are reported)")->check(dls::cli::positive);
  sub->add_option("--window", o->window,
                  "bandwidth: at most this many transfers in flight (0: each 64 MiB round at once); the receiver "
                  "holds one buffer per transfer in flight, ucx_perftest reuses one")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--profile", o->profile, "a `dilaserve profile` file: store the measured bandwidth and latency in it");
  sub->add_flag("--json", o->json_out, "print one JSON object");
  sub->add_flag("!--no-live", o->live, "skip the live figures (two-node clusters, moves through `migrate`)");
  sub->add_option("--live-canvas-moves", o->live_canvas_moves, "boundary moves of the live canvas figure")
      ->check(dls::cli::positive);
  sub->add_option("--live-midblock-moves", o->live_midblock_moves, "live mid-block moves per length and way")
      ->check(dls::cli::positive);
  sub->add_flag("--links-only", o->links_only,
                "measure only latency and bandwidth (no ucx_perftest, canvas or mid-block moves); with --profile, "
                "what the live transfer-or-recompute choice reads");
  sub->add_option("--peer-of", o->peer_of)->group("");  // internal: the destination process
  sub->add_option("--peer-tls", o->peer_tls)->group("");
  sub->add_option("--peer-encrypt", o->peer_encrypt)->group("");
  sub->add_option("--peer-key", o->peer_key)->group("");
  sub->add_option("--ready-fd", *ready_fd)->group("");
  return std::function<int()>([o, ready_fd] {
    const int longest = bench_config().max_seq;
    for (int L : o->lengths)
      if (L <= block || L > longest)
        throw std::invalid_argument("--lengths: " + std::to_string(L) + " is outside (" + std::to_string(block) + ", " +
                                    std::to_string(longest) + "], the block and the bench model's longest canvas");
    for (auto s : o->sizes)
      if (s == 0 || s > largest_size)
        throw std::invalid_argument("--sizes: " + std::to_string(s) + " bytes is outside [1, " +
                                    std::to_string(largest_size) + "] (1 GiB)");
    if (!o->peer_of.empty()) return run_peer(*o, *ready_fd);
    if (o->encrypt.empty()) throw std::invalid_argument("--encrypt: give true, false or both");
    if (o->encrypt.size() > 1 && !o->profile.empty())
      throw std::invalid_argument("--profile stores one link per transport: give --encrypt one value, the cluster's");
    return run(*o);
  });
}};

}  // namespace
}  // namespace dls::cli
