// A mid-block migration's KV cache over UCX: sent cut for the destination's TP degree when the
// measured link beats a refresh, awaited and imported at the destination, or rebuilt there.
#include "actors/tp_group_state.hpp"

#include "gpu/kv_reshard.hpp"
#include "gpu/kv_wire.hpp"
#include "policies/migration.hpp"
#include "runtime/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dls::actors::tp_group_impl {

namespace {

// For the fault tests (docs/runtime.md, "Data plane"): DILASERVE_KV_FAULT is a comma-separated list of
// faults the KV moves of this process take in turn: stall withholds the shards, corrupt sends
// them with a header that lies about their shape (twice the rows, half the width: the same
// size), truncate sends half of each. Unset in production.
std::string next_kv_fault() {
  static const std::vector<std::string> faults = [] {
    std::vector<std::string> out;
    const char* f = std::getenv("DILASERVE_KV_FAULT");
    std::string list = f ? f : "";
    for (std::size_t at = 0; at < list.size();) {
      auto end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      if (end > at) out.push_back(list.substr(at, end - at));
      at = end + 1;
    }
    return out;
  }();
  static std::atomic<std::size_t> next{0};
  return faults.empty() ? std::string() : faults[next++ % faults.size()];
}

std::string ms_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", 1e3 * s);
  return b;
}

// The KV cache did not come (deadline, dead source), or came wrong: every rank rebuilds it
// from the canvas of its last refresh, which gives the same tokens one refresh later.
void rebuild_instead(group_ptr self, pending_kv p, const std::string& why) {
  auto& st = self->state;
  const auto id = p.item.request_id;
  st.kv_refused += 1;
  rt::log_line(st.setup.name, "request " + std::to_string(id) + ": KV cache refused (" + why +
                                  "); rebuilding it from the canvas of its last refresh");
  for (auto& w : st.setup.workers) self->send(w, admit_atom::value, id, p.canvas, p.kv_source);
  join_queue(self, std::move(p), "rebuild");
}

// Whether shard `r` fits rank r of this group for a canvas of `rows` tokens ("" or why not):
// an import of another shape would leave the cache silently wrong.
std::string kv_shape_problem(const group_state& st, const rt::ucx_payload& shard, std::size_t r, int32_t rows) {
  const auto& cfg = st.setup.model->config;
  const auto k = static_cast<int32_t>(st.setup.workers.size());
  gpu::kv_dims d;
  try {
    d = gpu::parse_kv_wire(shard.view());
  } catch (const std::invalid_argument& e) {
    return "shard " + std::to_string(r) + ": " + e.what();
  }
  const int32_t width = cfg.n_kv_heads / k * cfg.head_dim();
  if (d.layers != cfg.n_layers || d.rows != rows || d.width != width)
    return "shard " + std::to_string(r) + " is " + std::to_string(d.layers) + "x" + std::to_string(d.rows) + "x" +
           std::to_string(d.width) + ", rank " + std::to_string(r) + " needs " + std::to_string(cfg.n_layers) + "x" +
           std::to_string(rows) + "x" + std::to_string(width) + " (layers x rows x width)";
  return "";
}

}  // namespace

// Mid-block to another process (or to a group of another degree in this one): sends every
// rank's KV cache, cut for the destination's degree, to the destination's UCX address and
// announces the transfer ids in `h`, when the profile's measured link says moving it beats one
// refresh at the destination (or ucx.kv_move says "transfer"). Returns "" when sent, else why
// not; the destination then rebuilds the cache from `h.kv_canvas`.
std::string send_kv(group_ptr self, const rt::migration_order& order, const std::vector<held_slot_ptr>& held,
                    const std::string& peer, const std::string& peer_error, rt::migration_handoff& h,
                    std::string& decided) {
  auto& st = self->state;
  const auto& ucx = *st.setup.ucx;
  if (peer.empty()) return "no UCX address for " + node_of_group(order.to) + ": " + peer_error;
  const auto& c = held[0]->slot.c;
  std::vector<std::string> shards;
  double bytes = 0;
  for (const auto& slot : held) {
    shards.push_back(slot->slot.cache->export_bytes());
    bytes += static_cast<double>(shards.back().size());
  }
  if (ucx.config().kv_move == "auto") {
    const auto& ctx = *st.setup.policy;
    if (!ctx.cost) return "no step-cost profile to compare a transfer with";
    const auto* link = policy::measured_link(ctx.cost->transfer, ucx.config().tls);
    if (!link)
      return "the profile has no link measured with ucx.tls " + ucx.config().tls +
             " (`dilaserve bench-migration --profile FILE` or `up` measure one)";
    policy::kv_move_choice choice;
    try {
      choice = policy::compare_kv_move(bytes, *link, *ctx.cost, order.to_degree, c.length(), c.params.block_length);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    if (!choice.transfer)
      return "recompute " + ms_text(choice.recompute_s) + " beats transfer " + ms_text(choice.transfer_s);
    decided = ": transfer " + ms_text(choice.transfer_s) + " < recompute " + ms_text(choice.recompute_s);
  }
  const auto to = static_cast<std::size_t>(order.to_degree);
  if (to != shards.size()) {
    std::vector<std::string_view> views(shards.begin(), shards.end());
    try {
      shards = gpu::reshard_kv(views, order.to_degree, st.setup.model->config.head_dim());
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  }
  const uint64_t first = take_transfer_ids(st, to);
  const auto fault = next_kv_fault();
  const auto deadline = rt::ucx_transport::clock::now() + std::chrono::milliseconds(ucx.config().timeout_ms);
  for (std::size_t r = 0; r < to; ++r) {
    auto& b = shards[r];
    if (fault == "corrupt" && b.size() >= gpu::kv_header_bytes) {
      int32_t dims[3];
      std::memcpy(dims, b.data(), sizeof dims);
      dims[1] *= 2;
      dims[2] /= 2;
      std::memcpy(b.data(), dims, sizeof dims);
    } else if (fault == "truncate") {
      b.resize(b.size() / 2);
    }
    if (fault == "stall") {
      rt::log_line(st.setup.name, "KV shard " + std::to_string(r) + " withheld (DILASERVE_KV_FAULT=stall)");
      continue;
    }
    const uint64_t t = first + r;
    st.setup.ucx->send(peer, t, std::make_shared<const std::string>(std::move(b)), deadline,
                       [name = st.setup.name, t](const std::string& e) {
                         if (!e.empty()) rt::log_line(name, "KV transfer " + std::to_string(t) + " failed: " + e);
                       });
  }
  h.how = "transfer";
  h.kv = {first, order.to_degree, node_of_group(order.to)};
  st.kv_sent += 1;
  return "";
}

// Why the process's copy of a KV cache in flight is not for this group, or "".
std::string kv_claim_problem(const group_state& st, const rt::kv_in_flight& kv) {
  if (!st.setup.ucx) return "this process runs no UCX transport";
  if (kv.node != st.setup.node) return "it was sent to node " + kv.node;
  if (kv.shards != static_cast<int32_t>(st.setup.workers.size()))
    return "it was cut for TP " + std::to_string(kv.shards) + ", this group is TP " +
           std::to_string(st.setup.workers.size());
  return "";
}

// Waits for the shards of a placement's KV cache, one per rank, until the transfer deadline;
// the progress thread hands each to this group as a message.
void await_kv(group_ptr self, pending_kv p) {
  auto& st = self->state;
  const auto id = p.item.request_id;
  const auto epoch = p.item.epoch;
  const auto first = p.item.kv.transfer;
  const auto k = st.setup.workers.size();
  p.shards.resize(k);
  p.left = k;
  st.pending.insert_or_assign(id, std::move(p));
  const auto deadline =
      rt::ucx_transport::clock::now() + std::chrono::milliseconds(st.setup.ucx->config().timeout_ms);
  auto me = caf::actor_cast<caf::actor>(self);
  for (std::size_t r = 0; r < k; ++r)
    st.setup.ucx->receive(first + r, deadline, [me, id, epoch, r](const std::string& e, rt::ucx_payload payload) {
      caf::send_as(me, me, kv_landed_atom::value, id, epoch, static_cast<int32_t>(r), e, std::move(payload));
    });
}

void on_kv_landed(group_ptr self, uint64_t id, uint32_t epoch, std::size_t rank, const std::string& error,
                  rt::ucx_payload payload) {
  auto& st = self->state;
  auto it = st.pending.find(id);
  if (it == st.pending.end() || it->second.item.epoch != epoch || it->second.importing) return;  // left meanwhile
  auto& p = it->second;
  if (!error.empty()) {
    if (p.error.empty()) p.error = error;
  } else if (rank < p.shards.size()) {
    p.shards[rank] = std::move(payload);
  }
  if (--p.left > 0) return;
  std::string why = p.error;
  for (std::size_t r = 0; why.empty() && r < p.shards.size(); ++r) why = kv_shape_problem(st, p.shards[r], r, p.rows);
  if (!why.empty()) {
    auto ready = std::move(p);
    st.pending.erase(it);
    rebuild_instead(self, std::move(ready), why);
    return;
  }
  p.importing = true;
  const auto k = st.setup.workers.size();
  auto left = std::make_shared<std::size_t>(k);
  auto failed = std::make_shared<std::string>();
  auto done = [=] {
    auto& st = self->state;
    auto it = st.pending.find(id);
    if (it == st.pending.end() || it->second.item.epoch != epoch) {
      // Handed on by a drain meanwhile: what the workers imported goes.
      step_order o{{id}};
      for (auto& w : st.setup.workers) self->send(w, drop_atom::value, o);
      return;
    }
    auto ready = std::move(it->second);
    st.pending.erase(it);
    ready.shards.clear();  // the receive buffers go back to the transport's pool
    if (!failed->empty()) {
      rebuild_instead(self, std::move(ready), *failed);
      return;
    }
    st.kv_imported += 1;
    join_queue(self, std::move(ready), "transfer");
  };
  for (std::size_t r = 0; r < k; ++r)
    self->request(st.setup.workers[r], step_timeout, admit_atom::value, id, p.canvas, p.kv_source, p.shards[r])
        .then(
            [=](std::string& e) {
              if (!e.empty() && failed->empty()) *failed = e;
              if (--*left == 0) done();
            },
            [=](caf::error& e) {
              if (failed->empty()) *failed = "worker " + std::to_string(r) + ": " + to_string(e);
              if (--*left == 0) done();
            });
}

}  // namespace dls::actors::tp_group_impl
