#include "runtime/ucx_transport.hpp"

#include "runtime/log.hpp"
#include "runtime/ucx_assembly.hpp"
#include "runtime/ucx_frame.hpp"
#include "runtime/ucx_lent.hpp"
#include "runtime/ucx_seal.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace dls::runtime {

namespace {

using clock = ucx_transport::clock;

constexpr unsigned am_transfer_id = 1;  // the one active-message id of the data plane
// The longest the progress thread sleeps without an event: deadlines are checked at least
// this often, so a transfer is failed at most 50 ms after its deadline.
constexpr int idle_wait_ms = 50;
// Deadlines are checked at most this often while events keep the loop busy: each check walks
// every transfer in flight, which would otherwise run once per progress call.
constexpr auto deadline_check_period = std::chrono::milliseconds(1);
// Receive buffers kept registered while idle: two of the largest KV caches measured here
// (256 MB) in flight plus slack; beyond it buffers are released.
constexpr std::size_t idle_receive_bytes = std::size_t{768} << 20;
// Unclaimed arrivals wait this long for their `receive`, in units of the transfer timeout.
constexpr int unclaimed_timeouts = 2;
// An eager message from this size up is kept where UCX assembled it (ucx_lent_buffers) instead
// of being copied into a pool buffer. Measured side by side over shared memory (bench-migration
// --links-only, whole rounds, medians of 10-12 alternating pairs): keeping it gave 0.82x at
// 32 KiB, 0.76x at 64 KiB, 0.97x at 96 KiB, 1.10-1.13x at 256-512 KiB and 1.25x at 1 MiB; below
// the crossover the copy, in cache, costs less than lending the buffer and giving it back.
constexpr std::size_t lend_from_bytes = std::size_t{128} << 10;
// Sealed buffers from this size up are sealed and opened on the hasher, not on the progress
// thread, which meanwhile moves other transfers: AES-GCM runs at about 3 GB/s a core here, so
// 64 KiB costs about 20 us, the order of a hop between the two threads; below it the hop would
// cost more than it frees.
constexpr std::size_t seal_on_hasher_from = std::size_t{64} << 10;
// How long teardown waits for endpoints to close before destroying the worker anyway.
constexpr auto close_grace = std::chrono::seconds(2);

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream parts(s);
  for (std::string name; std::getline(parts, name, ',');)
    if (!name.empty()) out.push_back(name);
  return out;
}

ucp_config_t* read_config(const std::string& tls, const std::string& devices, std::size_t tcp_segment_bytes) {
  ucp_config_t* c = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &c); s != UCS_OK)
    throw ucx_error(std::string("UCX: cannot read its configuration: ") + ucs_status_string(s));
  const std::string segment = std::to_string(tcp_segment_bytes);
  std::vector<std::pair<const char*, const std::string*>> keys{{"TLS", &tls}, {"NET_DEVICES", &devices}};
  // UCX 1.13 hands a key it does not know to the transports, matched on their own tables
  // without the transport's prefix: these are UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE.
  if (tcp_segment_bytes) keys.insert(keys.end(), {{"TX_SEG_SIZE", &segment}, {"RX_SEG_SIZE", &segment}});
  for (auto [key, value] : keys) {
    if (ucs_status_t s = ucp_config_modify(c, key, value->c_str()); s != UCS_OK) {
      ucp_config_release(c);
      throw ucx_error(std::string("UCX: bad ") + key + " '" + *value + "': " + ucs_status_string(s));
    }
  }
  return c;
}

ucp_context_h make_context(const std::string& tls, const std::string& devices, std::size_t tcp_segment_bytes,
                           bool shared) {
  ucp_config_t* c = read_config(tls, devices, tcp_segment_bytes);
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  p.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  p.mt_workers_shared = shared ? 1 : 0;  // receive buffers are (de)registered from any thread
  ucp_context_h ctx = nullptr;
  const ucs_status_t s = ucp_init(&p, c, &ctx);
  ucp_config_release(c);
  if (s != UCS_OK) return nullptr;
  return ctx;
}

// UCX starts with whatever part of UCX_TLS it has and only warns about the rest; a cluster
// file that asks for a transport must get it, so each is tried alone first.
void require_transports(const ucx_config& cfg) {
  for (const auto& name : split_names(cfg.tls)) {
    ucp_context_h ctx = make_context(name, cfg.net_devices, cfg.tcp_segment_bytes, false);
    if (!ctx)
      throw ucx_error("UCX transport '" + name + "' (ucx.tls: " + cfg.tls + ", ucx.net_devices: " + cfg.net_devices +
                      ") is not available on this host; `ucx_info -d` lists the ones that are");
    ucp_cleanup(ctx);
  }
}

struct send_op;
struct recv_op;

struct waiter {
  clock::time_point deadline;
  ucx_transport::receive_done done;
};

struct arrival {
  std::string error;
  ucx_payload payload;
  clock::time_point expires;
};

// The parts of one outgoing transfer: the sender's `done` runs once, when the last part is
// delivered or the first one fails.
struct send_group {
  uint64_t id = 0;
  ucx_transport::send_done done;
  std::size_t part_bytes = 0;
  uint32_t parts_total = 1;
  uint32_t left = 0;
  bool reported = false;
  bool tracked = false;  // in impl::groups (sends through the hasher), so teardown can answer it
};

// An incoming transfer in parts and the buffer they land in (given back once nothing is in
// flight on it; a failed one is kept, without its buffer, until it expires, so that its late
// parts are dropped rather than starting it again).
struct incoming {
  ucx_assembly parts;
  ucx_buffer_pool::buffer buffer;
  clock::time_point expires;
};

}  // namespace

struct ucx_transport::impl {
  ucx_config cfg;
  std::string seal_key;  // the cluster's data-plane key with ucx.encrypt, else empty
  bool peer_errors = true;
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;
  int epfd = -1;
  std::string address;
  std::shared_ptr<ucx_buffer_pool> pool;
  std::shared_ptr<ucx_lent_buffers> lent;  // eager buffers kept where UCX assembled them
  std::thread thread;

  std::mutex mu;  // guards tasks and stopping
  std::deque<std::function<void()>> tasks;
  bool stopping = false;

  // The hashing thread: checksums (or seals) of parts being sent and of parts that landed, so
  // that the progress thread moves the next part meanwhile.
  std::thread hasher;
  std::mutex hash_mu;  // guards hash_jobs and hash_stopping
  std::condition_variable hash_cv;
  std::deque<std::function<void()>> hash_jobs;
  bool hash_stopping = false;

  // Owned by the progress thread.
  std::map<std::string, ucp_ep_h> eps;
  std::map<ucp_ep_h, std::string> peer_of;
  std::set<send_op*> sends;
  std::set<recv_op*> recvs;
  std::map<uint64_t, waiter> waiting;
  std::map<uint64_t, arrival> arrived;
  std::map<uint64_t, incoming> assemblies;
  ucx_transport::arrival_handler unasked;  // transfers with unasked_bit
  std::set<std::shared_ptr<send_group>> groups;  // multi-part sends not yet reported
  std::vector<void*> closing;
  clock::time_point next_deadline_check{};

  impl(const ucx_config& c, std::string key);
  bool sealing() const { return !seal_key.empty(); }
  // A part's header for `peer`, its payload checksummed, or sealed into a buffer of its own.
  struct outgoing_part {
    ucx_frame_header header;
    std::shared_ptr<const void> owner;  // keeps `payload` alive
    const char* payload;
    ucp_mem_h memh = nullptr;  // a sealed copy lies in registered memory from the pool
  };
  outgoing_part prepare_part(const std::string& peer, ucx_frame_header h, std::shared_ptr<const std::string> whole);
  // Checks (or opens, in place) a landed payload: "" or why it is refused.
  std::string check_payload(const ucx_frame_header& h, char* data) const;
  // Checks a transfer that arrived whole and hands it on, on the hasher when it is sealed and large.
  void check_then_land(const ucx_frame_header& h, char* data, ucx_payload payload);
  ~impl();
  void post(std::function<void()> task);
  void hash_later(std::function<void()> job);
  void hash_loop();
  void loop();
  void run_tasks();
  void check_deadlines();
  ucp_ep_h endpoint(const std::string& peer);
  void drop_endpoint(ucp_ep_h ep, bool force);
  void start_send(const std::string& peer, uint64_t id, std::shared_ptr<const std::string> bytes,
                  clock::time_point deadline, send_done done);
  void send_in_parts(const std::string& peer, uint64_t id, std::shared_ptr<const std::string> bytes,
                     clock::time_point deadline, send_done done);
  void start_part(const std::string& peer, outgoing_part part, std::shared_ptr<send_group> group,
                  clock::time_point deadline);
  void report(send_group& g, const std::string& error);
  void finish_send(send_op* op, ucs_status_t status);
  ucs_status_t on_part(const ucx_frame_header& h, void* data, std::size_t length, bool rndv);
  ucs_status_t refuse(const ucx_frame_header& h, std::string why, bool rndv);
  void check_part(uint64_t id, const ucx_frame_header& h, char* bytes);
  void part_checked(uint64_t id, const std::string& error);
  void fail_incoming(uint64_t id, incoming& in, const std::string& error);
  void release_if_idle(std::map<uint64_t, incoming>::iterator it, clock::time_point now);
  void landed(uint64_t id, std::string error, ucx_payload payload);
  ucs_status_t on_message(const void* header, std::size_t header_length, void* data, std::size_t length,
                          const ucp_am_recv_param_t* param);
  void finish_receive(recv_op* op, ucs_status_t status, std::size_t length);
  void teardown();
  std::string timeout_text() const { return std::to_string(cfg.timeout_ms) + " ms (ucx.timeout_ms)"; }
};

namespace {

struct send_op {
  ucx_frame_header header;  // UCX 1.13 may read the header after the send call returns
  std::shared_ptr<const void> bytes;  // owns `payload`
  const char* payload;
  ucp_mem_h memh;
  std::shared_ptr<send_group> group;
  clock::time_point deadline;
  std::string peer;
  ucx_transport::impl* owner = nullptr;
};

struct recv_op {
  ucx_frame_header header;
  ucx_buffer_pool::buffer buffer;  // a transfer sent whole; a part lands in its assembly's
  ucx_transport::impl* owner = nullptr;
  // Set when the transport stopped with the receive still in UCX and left the worker to the
  // holders of lent buffers (teardown): the worker's destroy completes it later, and the
  // completion gives the buffer back here instead of to a transport that is gone.
  std::shared_ptr<ucx_buffer_pool> orphaned_in;
};

void on_sent(void* request, ucs_status_t status, void* user) {
  auto* op = static_cast<send_op*>(user);
  op->owner->finish_send(op, status);
  ucp_request_free(request);
}

void on_landed(void* request, ucs_status_t status, std::size_t length, void* user) {
  auto* op = static_cast<recv_op*>(user);
  if (op->orphaned_in) {
    if (op->header.parts == 1) op->orphaned_in->give(op->buffer);
    delete op;
    ucp_request_free(request);
    return;
  }
  op->owner->finish_receive(op, status, length);
  ucp_request_free(request);
}

ucs_status_t on_am(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                   const ucp_am_recv_param_t* param) {
  return static_cast<ucx_transport::impl*>(arg)->on_message(header, header_length, data, length, param);
}

void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<ucx_transport::impl*>(arg);
  log_line("ucx", std::string("a peer endpoint failed: ") + ucs_status_string(status));
  // Not closed inside UCX's own callback: the next pass of the loop does it.
  self->post([self, ep] { self->drop_endpoint(ep, true); });
}

}  // namespace

bool ucx_handles_peer_errors(const std::string& tls) {
  static const std::set<std::string> shm{"all", "sm", "shm", "posix", "sysv", "mm", "cma", "knem", "xpmem"};
  for (const auto& n : split_names(tls))
    if (shm.count(n)) return false;
  return true;
}

ucx_transport::impl::impl(const ucx_config& c, std::string key)
    : cfg(c), seal_key(c.encrypt ? std::move(key) : std::string()), peer_errors(ucx_handles_peer_errors(c.tls)) {
  if (cfg.encrypt && seal_key.size() != ucx_seal_key_bytes)
    throw ucx_error("ucx.encrypt is on, but the data plane was given no key of " + std::to_string(ucx_seal_key_bytes) +
                    " bytes (" + std::to_string(seal_key.size()) + ")");
  require_transports(cfg);
  ctx = make_context(cfg.tls, cfg.net_devices, cfg.tcp_segment_bytes, true);
  if (!ctx) throw ucx_error("UCX could not start with ucx.tls: " + cfg.tls);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread touches the worker
  if (ucs_status_t s = ucp_worker_create(ctx, &wp, &worker); s != UCS_OK) {
    ucp_cleanup(ctx);
    throw ucx_error(std::string("UCX: cannot create a worker with ucx.tls: ") + cfg.tls + ": " + ucs_status_string(s));
  }
  auto fail = [&](const std::string& what, ucs_status_t s) {
    if (epfd >= 0) ::close(epfd);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    throw ucx_error("UCX: " + what + ": " + ucs_status_string(s));
  };
  ucp_address_t* addr = nullptr;
  std::size_t addr_len = 0;
  if (ucs_status_t s = ucp_worker_get_address(worker, &addr, &addr_len); s != UCS_OK) fail("no worker address", s);
  address.assign(reinterpret_cast<const char*>(addr), addr_len);
  ucp_worker_release_address(worker, addr);
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = am_transfer_id;
  hp.cb = on_am;
  hp.arg = this;
  if (ucs_status_t s = ucp_worker_set_am_recv_handler(worker, &hp); s != UCS_OK) fail("cannot set the AM handler", s);
  int efd = -1;
  if (ucs_status_t s = ucp_worker_get_efd(worker, &efd); s != UCS_OK) fail("no event fd", s);
  epfd = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epfd < 0 || ::epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev) != 0) fail("epoll on the worker's event fd", UCS_ERR_IO_ERROR);
  pool = std::make_shared<ucx_buffer_pool>(ctx, idle_receive_bytes);
  lent = std::make_shared<ucx_lent_buffers>(worker);
  // The transport's threads take no process signals (they inherit a full mask): a handler the
  // program installs runs on one of its own threads, never in the middle of UCX's progress or a
  // hash, where it could find malloc's lock held. (A test framework's SIGCHLD handler that
  // longjmp'd out of the hashing thread deadlocked a test run on that lock.)
  struct signals_blocked {
    sigset_t old;
    signals_blocked() {
      sigset_t all;
      sigfillset(&all);
      ::pthread_sigmask(SIG_SETMASK, &all, &old);
    }
    ~signals_blocked() { ::pthread_sigmask(SIG_SETMASK, &old, nullptr); }
  } blocked;
  // Named so that `top -H`, perf and gdb tell the data plane's threads from the engine's.
  thread = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "ucx-progress");
    loop();
  });
  hasher = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "ucx-hash");
    hash_loop();
  });
}

ucx_transport::impl::~impl() {
  // The hasher first: checks it has not begun are dropped (teardown answers their transfers),
  // and what it finishes is posted to the progress thread, which is still running.
  {
    std::lock_guard<std::mutex> lock(hash_mu);
    hash_stopping = true;
  }
  hash_cv.notify_one();
  hasher.join();
  // What the hasher never began goes now, while the progress thread still runs: lent buffers
  // among it go back to UCX through that thread (teardown answers the transfers).
  hash_jobs.clear();
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  ucp_worker_signal(worker);
  thread.join();
  teardown();
}

void ucx_transport::impl::hash_later(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(hash_mu);
    if (hash_stopping) return;
    hash_jobs.push_back(std::move(job));
  }
  hash_cv.notify_one();
}

void ucx_transport::impl::hash_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(hash_mu);
      hash_cv.wait(lock, [&] { return hash_stopping || !hash_jobs.empty(); });
      if (hash_stopping) return;
      job = std::move(hash_jobs.front());
      hash_jobs.pop_front();
    }
    job();
  }
}

void ucx_transport::impl::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu);
    tasks.push_back(std::move(task));
  }
  ucp_worker_signal(worker);  // documented as callable from any thread
}

void ucx_transport::impl::run_tasks() {
  std::deque<std::function<void()>> now;
  {
    std::lock_guard<std::mutex> lock(mu);
    now.swap(tasks);
  }
  for (auto& t : now) t();
}

void ucx_transport::impl::loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) return;
    }
    run_tasks();
    lent->release_dropped();
    if (const auto now = clock::now(); now >= next_deadline_check) {
      next_deadline_check = now + deadline_check_period;
      check_deadlines();
    }
    if (ucp_worker_progress(worker)) continue;
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;  // events arrived meanwhile
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) return;
      if (!tasks.empty()) continue;
    }
    epoll_event ev{};
    ::epoll_wait(epfd, &ev, 1, idle_wait_ms);
  }
}

void ucx_transport::impl::check_deadlines() {
  const auto now = clock::now();
  for (auto it = waiting.begin(); it != waiting.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    auto done = std::move(it->second.done);
    const uint64_t id = it->first;
    it = waiting.erase(it);
    done("ucx transfer " + std::to_string(id) + ": nothing arrived within its deadline", {});
  }
  for (auto it = arrived.begin(); it != arrived.end();)
    it = it->second.expires <= now ? arrived.erase(it) : std::next(it);
  for (auto it = assemblies.begin(); it != assemblies.end();) {
    auto next = std::next(it);
    if (it->second.expires <= now) {
      auto& in = it->second;
      if (!in.parts.failed)
        fail_incoming(it->first, in,
                      "ucx transfer " + std::to_string(it->first) + ": " + std::to_string(in.parts.arrived()) + " of " +
                          std::to_string(in.parts.parts()) + " parts arrived within its deadline");
      release_if_idle(it, now);
    }
    it = next;
  }
  std::set<std::string> stuck;
  for (auto* op : sends) {
    if (op->group->reported || op->deadline > now) continue;
    report(*op->group, "ucx transfer " + std::to_string(op->header.transfer_id) + ": not delivered within its deadline");
    stuck.insert(op->peer);
  }
  // Closing the endpoint cancels what is still in flight on it, which frees those sends.
  for (const auto& peer : stuck)
    if (auto it = eps.find(peer); it != eps.end()) drop_endpoint(it->second, true);
}

ucp_ep_h ucx_transport::impl::endpoint(const std::string& peer) {
  if (auto it = eps.find(peer); it != eps.end()) return it->second;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
  ep.err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (peer_errors) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = this;
  }
  ucp_ep_h h = nullptr;
  if (ucs_status_t s = ucp_ep_create(worker, &ep, &h); s != UCS_OK)
    throw ucx_error(std::string("ucx: cannot reach the peer with ucx.tls: ") + cfg.tls + ": " + ucs_status_string(s));
  eps.emplace(peer, h);
  peer_of.emplace(h, peer);
  return h;
}

void ucx_transport::impl::drop_endpoint(ucp_ep_h ep, bool force) {
  auto it = peer_of.find(ep);
  if (it == peer_of.end()) return;  // already dropped
  eps.erase(it->second);
  peer_of.erase(it);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* r = ucp_ep_close_nbx(ep, &p);
  if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
}

void ucx_transport::impl::start_send(const std::string& peer, uint64_t id, std::shared_ptr<const std::string> bytes,
                                     clock::time_point deadline, send_done done) {
  if (peer == address) {  // a hand-over inside this process: the receiver gets this very buffer
    ucx_payload p{bytes, bytes->data(), bytes->size()};
    landed(id, {}, std::move(p));
    done({});
    return;
  }
  auto group = std::make_shared<send_group>();
  group->id = id;
  group->done = std::move(done);
  group->left = 1;
  outgoing_part part;
  try {
    const auto geometry = make_part_geometry(id, bytes->size(), 0, 0, 1);
    part = prepare_part(peer, geometry, std::move(bytes));
  } catch (const std::exception& e) {
    report(*group, "ucx transfer " + std::to_string(id) + ": " + e.what());
    return;
  }
  start_part(peer, std::move(part), std::move(group), deadline);
}

ucx_transport::impl::outgoing_part ucx_transport::impl::prepare_part(const std::string& peer, ucx_frame_header h,
                                                                     std::shared_ptr<const std::string> whole) {
  const char* in = whole->data() + h.offset;
  if (!sealing()) {
    h.checksum = frame_checksum(in, static_cast<std::size_t>(h.bytes));
    return {h, std::move(whole), in};
  }
  if (h.bytes == 0) {
    seal_part(seal_key, peer, h, in, nullptr);
    return {h, std::move(whole), in};
  }
  // Into a pooled buffer: a fresh one per part would cost page faults over every byte.
  auto b = pool->take(static_cast<std::size_t>(h.bytes));
  try {
    seal_part(seal_key, peer, h, in, b.data);
  } catch (...) {
    pool->give(b);
    throw;
  }
  auto sealed = pool->as_payload(b, b.size);
  return {h, std::move(sealed.owner), sealed.data, b.memh};
}

void ucx_transport::impl::check_then_land(const ucx_frame_header& h, char* data, ucx_payload payload) {
  if (!sealing() || h.bytes < seal_on_hasher_from) {
    landed(h.transfer_id, check_payload(h, data), std::move(payload));
    return;
  }
  hash_later([this, h, data, payload = std::move(payload)]() mutable {
    auto why = check_payload(h, data);
    post([this, id = h.transfer_id, why = std::move(why), payload = std::move(payload)]() mutable {
      landed(id, std::move(why), std::move(payload));
    });
  });
}

std::string ucx_transport::impl::check_payload(const ucx_frame_header& h, char* data) const {
  if (!sealing()) return check_frame_payload(h, std::string_view(data, static_cast<std::size_t>(h.bytes)));
  return open_part(seal_key, address, h, data);
}

void ucx_transport::impl::send_in_parts(const std::string& peer, uint64_t id, std::shared_ptr<const std::string> bytes,
                                        clock::time_point deadline, send_done done) {
  auto group = std::make_shared<send_group>();
  group->id = id;
  group->done = std::move(done);
  // Parts of the configured size, or larger for a buffer that would need more than a header allows.
  // (ucx.part_bytes 0 sends every buffer whole: one part, through here only to be sealed.)
  group->part_bytes = cfg.part_bytes == 0 ? bytes->size()
                                          : std::max<std::size_t>(cfg.part_bytes,
                                                                  (bytes->size() + ucx_max_parts - 1) / ucx_max_parts);
  group->parts_total = parts_for(bytes->size(), group->part_bytes);
  group->left = group->parts_total;
  group->tracked = true;
  groups.insert(group);
  // One job a part: the hasher posts each part as soon as it is hashed, and the checks of
  // parts arriving here take turns with them.
  for (uint32_t part = 0; part < group->parts_total; ++part)
    hash_later([this, peer, bytes, group, deadline, part] {
      const auto h = make_part_geometry(group->id, bytes->size(), group->part_bytes, part, group->parts_total);
      try {
        auto out = std::make_shared<outgoing_part>(prepare_part(peer, h, bytes));
        post([this, peer, out, group, deadline] { start_part(peer, std::move(*out), group, deadline); });
      } catch (const std::exception& e) {
        post([this, group, why = std::string(e.what())] {
          report(*group, "ucx transfer " + std::to_string(group->id) + ": " + why);
        });
      }
    });
}

void ucx_transport::impl::start_part(const std::string& peer, outgoing_part part, std::shared_ptr<send_group> group,
                                     clock::time_point deadline) {
  if (group->reported) return;  // an earlier part failed or missed the deadline
  ucp_ep_h ep = nullptr;
  try {
    ep = endpoint(peer);
  } catch (const std::exception& e) {
    report(*group, e.what());
    return;
  }
  auto* op = new send_op{part.header, std::move(part.owner), part.payload, part.memh, std::move(group), deadline, peer, this};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = op->header.bytes > cfg.rndv_threshold_bytes ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER;
  p.cb.send = on_sent;
  p.user_data = op;
  if (op->memh) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = op->memh;
  }
  void* r = ucp_am_send_nbx(ep, am_transfer_id, &op->header, sizeof op->header, op->payload,
                            static_cast<std::size_t>(op->header.bytes), &p);
  if (UCS_PTR_IS_PTR(r)) {
    sends.insert(op);
    return;
  }
  finish_send(op, UCS_PTR_STATUS(r));  // done at once, or failed at once
}

void ucx_transport::impl::report(send_group& g, const std::string& error) {
  if (g.reported) return;
  g.reported = true;
  g.done(error);
  if (!g.tracked) return;
  for (auto it = groups.begin(); it != groups.end(); ++it)
    if (it->get() == &g) {
      groups.erase(it);
      break;
    }
}

void ucx_transport::impl::finish_send(send_op* op, ucs_status_t status) {
  auto& g = *op->group;
  if (status != UCS_OK)
    report(g, "ucx transfer " + std::to_string(g.id) + " failed: " + ucs_status_string(status));
  else if (--g.left == 0)
    report(g, {});
  sends.erase(op);
  delete op;
}

void ucx_transport::impl::landed(uint64_t id, std::string error, ucx_payload payload) {
  if ((id & unasked_bit) && unasked) {
    unasked(id, error, std::move(payload));
    return;
  }
  if (auto it = waiting.find(id); it != waiting.end()) {
    auto done = std::move(it->second.done);
    waiting.erase(it);
    done(error, std::move(payload));
    return;
  }
  const auto expires = clock::now() + unclaimed_timeouts * std::chrono::milliseconds(cfg.timeout_ms);
  arrived[id] = arrival{std::move(error), std::move(payload), expires};
}

ucs_status_t ucx_transport::impl::on_message(const void* header, std::size_t header_length, void* data,
                                             std::size_t length, const ucp_am_recv_param_t* param) {
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  std::string error = check_frame_header(header, header_length, length);
  if (!error.empty()) {
    // Without a trustworthy header there is no transfer to report to; the log says why, and a
    // rendezvous sender learns it from its send's status.
    log_line("ucx", error);
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  ucx_frame_header h;
  std::memcpy(&h, header, sizeof h);
  if (auto why = check_frame_sealing(h, sealing()); !why.empty()) return refuse(h, std::move(why), rndv);
  if (h.parts > 1) return on_part(h, data, length, rndv);
  const bool lent_to_us = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA;
  if (!rndv && lent_to_us && length >= lend_from_bytes && !(h.transfer_id & unasked_bit)) {
    // UCX lends the buffer it assembled the message in: checked there and kept, not copied.
    // (Peer-kept snapshots, held for a request's whole life, are copied into the pool below,
    // so that what UCX lends goes back as soon as its consumer has read it.)
    // Checked (or opened in place) once it is ours: the buffer is ours until we give it back.
    ucx_payload payload;
    try {
      payload = lent->lend(data, length);
    } catch (const std::exception& e) {
      // lend has queued the buffer for release already.
      landed(h.transfer_id, "ucx transfer " + std::to_string(h.transfer_id) + ": cannot keep it: " + e.what(), {});
      return UCS_INPROGRESS;
    }
    check_then_land(h, static_cast<char*>(data), std::move(payload));
    return UCS_INPROGRESS;
  }
  ucx_buffer_pool::buffer b;
  try {
    b = pool->take(length);
  } catch (const std::exception& e) {
    landed(h.transfer_id, e.what(), {});
    return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
  }
  if (!rndv) {
    if (length) std::memcpy(b.data, data, length);  // eager data lives only during this call
    check_then_land(h, b.data, pool->as_payload(b, length));
    return UCS_OK;
  }
  auto* op = new recv_op{h, b, this, nullptr};
  ucp_request_param_t q{};
  q.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL |
                   UCP_OP_ATTR_FIELD_MEMH;
  q.cb.recv_am = on_landed;
  q.user_data = op;
  q.memh = b.memh;
  void* r = ucp_am_recv_data_nbx(worker, data, b.data, length, &q);
  if (UCS_PTR_IS_ERR(r)) {
    pool->give(b);
    delete op;
    landed(h.transfer_id, std::string("ucx transfer ") + std::to_string(h.transfer_id) +
                              ": cannot receive: " + ucs_status_string(UCS_PTR_STATUS(r)), {});
    return UCS_OK;
  }
  recvs.insert(op);
  return UCS_INPROGRESS;
}

// A transfer in parts is refused once: its record stays, failed, so that its other parts are dropped
// without a line each.
ucs_status_t ucx_transport::impl::refuse(const ucx_frame_header& h, std::string why, bool rndv) {
  const auto status = rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  if (h.parts == 1) {
    log_line("ucx", why);
    landed(h.transfer_id, std::move(why), {});
    return status;
  }
  const auto now = clock::now();
  auto it = assemblies.find(h.transfer_id);
  if (it == assemblies.end())
    it = assemblies.emplace(h.transfer_id, incoming{ucx_assembly(h), {}, now + std::chrono::milliseconds(cfg.timeout_ms)})
             .first;
  else if (it->second.parts.failed)
    return rndv ? UCS_ERR_CANCELED : UCS_OK;
  log_line("ucx", why);
  fail_incoming(h.transfer_id, it->second, why);
  release_if_idle(it, now);
  return status;
}

ucs_status_t ucx_transport::impl::on_part(const ucx_frame_header& h, void* data, std::size_t length, bool rndv) {
  const uint64_t id = h.transfer_id;
  auto it = assemblies.find(id);
  if (it == assemblies.end()) {
    ucx_buffer_pool::buffer b;
    std::string no_buffer;
    try {
      b = pool->take(static_cast<std::size_t>(h.total));
    } catch (const std::exception& e) {
      no_buffer = e.what();
    }
    const auto expires = clock::now() + std::chrono::milliseconds(cfg.timeout_ms);
    it = assemblies.emplace(id, incoming{ucx_assembly(h), b, expires}).first;
    if (!no_buffer.empty()) {
      // Kept as failed, so that its other parts are dropped rather than retried.
      fail_incoming(id, it->second, no_buffer);
      return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
    }
  }
  auto& in = it->second;
  if (in.parts.failed) return rndv ? UCS_ERR_CANCELED : UCS_OK;
  if (auto why = in.parts.admit(h); !why.empty()) {
    log_line("ucx", why);
    fail_incoming(id, in, why);
    release_if_idle(it, clock::now());
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  char* dest = in.buffer.data + h.offset;
  if (!rndv) {
    if (length) std::memcpy(dest, data, length);  // eager data lives only during this call
    check_part(id, h, dest);
    return UCS_OK;
  }
  auto* op = new recv_op{h, {}, this, nullptr};
  ucp_request_param_t q{};
  q.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL |
                   UCP_OP_ATTR_FIELD_MEMH;
  q.cb.recv_am = on_landed;
  q.user_data = op;
  q.memh = in.buffer.memh;
  void* r = ucp_am_recv_data_nbx(worker, data, dest, length, &q);
  if (UCS_PTR_IS_ERR(r)) {
    delete op;
    fail_incoming(id, in, "ucx transfer " + std::to_string(id) + ": cannot receive part " + std::to_string(h.part) + ": " +
                              ucs_status_string(UCS_PTR_STATUS(r)));
    release_if_idle(it, clock::now());
    return UCS_OK;
  }
  ++in.parts.in_flight;
  recvs.insert(op);
  return UCS_INPROGRESS;
}

void ucx_transport::impl::check_part(uint64_t id, const ucx_frame_header& h, char* bytes) {
  auto it = assemblies.find(id);
  ++it->second.parts.in_flight;  // the buffer stays until the check is back
  hash_later([this, id, h, bytes] {
    auto error = check_payload(h, bytes);
    post([this, id, error] { part_checked(id, error); });
  });
}

void ucx_transport::impl::part_checked(uint64_t id, const std::string& error) {
  auto it = assemblies.find(id);
  if (it == assemblies.end()) return;
  auto& in = it->second;
  --in.parts.in_flight;
  if (!in.parts.failed) {
    if (!error.empty()) {
      fail_incoming(id, in, error);
    } else {
      in.parts.part_checked();
      if (in.parts.whole()) {
        auto payload = pool->as_payload(in.buffer, static_cast<std::size_t>(in.parts.total()));
        assemblies.erase(it);
        landed(id, {}, std::move(payload));
        return;
      }
    }
  }
  release_if_idle(it, clock::now());
}

void ucx_transport::impl::fail_incoming(uint64_t id, incoming& in, const std::string& error) {
  in.parts.failed = true;
  landed(id, error, {});
}

void ucx_transport::impl::release_if_idle(std::map<uint64_t, incoming>::iterator it, clock::time_point now) {
  auto& in = it->second;
  if (!in.parts.failed || in.parts.in_flight > 0) return;
  if (in.buffer.data) {
    pool->give(in.buffer);
    in.buffer = {};
  }
  if (in.expires <= now) assemblies.erase(it);
}

void ucx_transport::impl::finish_receive(recv_op* op, ucs_status_t status, std::size_t length) {
  recvs.erase(op);
  const uint64_t id = op->header.transfer_id;
  if (op->header.parts > 1) {
    if (auto it = assemblies.find(id); it != assemblies.end()) {
      auto& in = it->second;
      --in.parts.in_flight;
      if (status != UCS_OK) {
        if (!in.parts.failed)
          fail_incoming(id, in, "ucx transfer " + std::to_string(id) + " failed while part " +
                                    std::to_string(op->header.part) + " was arriving (the sender or its link failed): " +
                                    ucs_status_string(status));
        release_if_idle(it, clock::now());
      } else {
        check_part(id, op->header, in.buffer.data + op->header.offset);
      }
    }
    delete op;
    return;
  }
  if (status != UCS_OK) {
    pool->give(op->buffer);
    landed(id, "ucx transfer " + std::to_string(id) + " failed while arriving (the sender or its link failed): " +
                   ucs_status_string(status), {});
  } else {
    if (length == op->header.bytes)
      check_then_land(op->header, op->buffer.data, pool->as_payload(op->buffer, length));
    else
      landed(id, check_frame_payload(op->header, std::string_view(op->buffer.data, length)),
             pool->as_payload(op->buffer, length));
  }
  delete op;
}

void ucx_transport::impl::teardown() {
  // The progress thread has stopped; this thread owns the worker now. Tasks posted after the
  // last pass still run, so every callback is answered.
  run_tasks();
  // Closed by flushing, not by force: an eager send is done when its buffer may be reused,
  // not when it has arrived, so a process that stops its transport right after sending
  // (a node that hands its last snapshots over and exits) would otherwise drop what is still
  // on the wire. A peer that cannot answer the flush holds the close up by close_grace at most.
  std::vector<ucp_ep_h> open;
  for (auto& [ep, peer] : peer_of) open.push_back(ep);
  for (auto ep : open) drop_endpoint(ep, false);
  const auto until = clock::now() + close_grace;
  for (;;) {
    ucp_worker_progress(worker);
    std::vector<void*> still;
    for (void* r : closing) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS)
        still.push_back(r);
      else
        ucp_request_free(r);
    }
    closing.swap(still);
    if ((closing.empty() && sends.empty()) || clock::now() > until) break;
  }
  for (void* r : closing) ucp_request_free(r);
  for (auto* op : std::set<send_op*>(sends)) {
    report(*op->group, "ucx transfer " + std::to_string(op->header.transfer_id) + ": the transport stopped");
    delete op;
  }
  sends.clear();
  // Multi-part sends with parts still unhashed when the hasher stopped.
  for (auto g : std::set<std::shared_ptr<send_group>>(groups))
    report(*g, "ucx transfer " + std::to_string(g->id) + ": the transport stopped");
  for (auto& [id, w] : waiting) w.done("ucx transfer " + std::to_string(id) + ": the transport stopped", {});
  waiting.clear();
  arrived.clear();
  std::set<recv_op*> left;
  left.swap(recvs);
  // A lent eager buffer goes back to the worker that lent it, so the worker outlives its holders:
  // they get close_grace to drop theirs (a consumer imports a KV cache in milliseconds); a
  // worker still lent to someone after that goes with the last drop (hand_over_worker), not now.
  const bool worker_goes = lent->wait_all_dropped(clock::now() + close_grace);
  if (worker_goes) {
    ucp_worker_destroy(worker);  // cancels receives a dead peer will never finish
    for (auto* op : left) {
      if (op->header.parts == 1) pool->give(op->buffer);
      delete op;
    }
  } else {
    log_line("ucx", std::to_string(lent->held()) +
                        " received buffers are still held after the transport stopped; its UCX worker stays "
                        "until the last is dropped");
    for (auto* op : left) op->orphaned_in = pool;
  }
  for (auto& [id, in] : assemblies)
    if (in.buffer.data) pool->give(in.buffer);
  assemblies.clear();
  pool->close();
  ::close(epfd);
  if (worker_goes)
    ucp_cleanup(ctx);
  else
    lent->hand_over_worker(ctx);
}

// -- the public face ----------------------------------------------------------------------

ucx_transport::ucx_transport(const ucx_config& cfg, std::string seal_key)
    : impl_(std::make_unique<impl>(cfg, std::move(seal_key))) {}
ucx_transport::~ucx_transport() = default;

const std::string& ucx_transport::address() const { return impl_->address; }
const ucx_config& ucx_transport::config() const { return impl_->cfg; }

void ucx_transport::send(const std::string& peer_address, uint64_t id, std::shared_ptr<const std::string> bytes,
                         clock::time_point deadline, send_done done) {
  if (!bytes) throw std::invalid_argument("ucx_transport::send: no buffer");
  auto* self = impl_.get();
  // A hand-over stays one zero-copy step whatever its size. Parts, and a large buffer to seal,
  // go through the hasher.
  const bool in_parts = peer_address != self->address && (parts_for(bytes->size(), self->cfg.part_bytes) > 1 ||
                                                          (self->sealing() && bytes->size() >= seal_on_hasher_from));
  self->post([self, peer_address, id, bytes = std::move(bytes), deadline, done = std::move(done), in_parts]() mutable {
    if (in_parts)
      self->send_in_parts(peer_address, id, std::move(bytes), deadline, std::move(done));
    else
      self->start_send(peer_address, id, std::move(bytes), deadline, std::move(done));
  });
}

void ucx_transport::on_unasked(arrival_handler handler) {
  auto* self = impl_.get();
  self->post([self, handler = std::move(handler)]() mutable { self->unasked = std::move(handler); });
}

void ucx_transport::receive(uint64_t id, clock::time_point deadline, receive_done done) {
  auto* self = impl_.get();
  self->post([self, id, deadline, done = std::move(done)]() mutable {
    if (auto it = self->arrived.find(id); it != self->arrived.end()) {
      auto a = std::move(it->second);
      self->arrived.erase(it);
      done(a.error, std::move(a.payload));
      return;
    }
    if (self->waiting.count(id)) {
      done("ucx transfer " + std::to_string(id) + ": already awaited", {});
      return;
    }
    self->waiting.emplace(id, waiter{deadline, std::move(done)});
  });
}

std::string ucx_transport::send_wait(const std::string& peer_address, uint64_t id,
                                     std::shared_ptr<const std::string> bytes) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto result = done->get_future();
  send(peer_address, id, std::move(bytes), clock::now() + std::chrono::milliseconds(impl_->cfg.timeout_ms),
       [done](const std::string& e) { done->set_value(e); });
  return result.get();  // the progress thread answers by the deadline at the latest
}

ucx_transport::received ucx_transport::receive_wait(uint64_t id) {
  auto done = std::make_shared<std::promise<received>>();
  auto result = done->get_future();
  receive(id, clock::now() + std::chrono::milliseconds(impl_->cfg.timeout_ms),
          [done](const std::string& e, ucx_payload p) { done->set_value({e, std::move(p)}); });
  return result.get();
}

std::size_t ucx_transport::lent_buffers_held() const { return impl_->lent->held(); }

std::string ucx_transport::describe_lanes(const std::string& peer_address) {
  auto* self = impl_.get();
  auto done = std::make_shared<std::promise<std::string>>();
  auto result = done->get_future();
  self->post([self, peer_address, done] {
    try {
      ucp_ep_h ep = self->endpoint(peer_address);
      char* text = nullptr;
      std::size_t size = 0;
      FILE* f = ::open_memstream(&text, &size);
      ucp_ep_print_info(ep, f);
      std::fclose(f);
      std::string out(text, size);
      std::free(text);
      done->set_value(out);
    } catch (const std::exception& e) {
      done->set_value(e.what());
    }
  });
  return result.get();
}

}  // namespace dls::runtime
