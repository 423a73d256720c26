#pragma once
// Messages between a TP group and its workers. They never leave the node process (the
// group and its workers always share it, as the shared-memory all-reduce requires),
// so they carry pointers and engine structs without serialization.
#include "actors/answer_text.hpp"
#include "actors/device_pool.hpp"
#include "actors/policy_view.hpp"
#include "gpu/allreduce.hpp"
#include "gpu/engine.hpp"
#include "runtime/messages.hpp"
#include "runtime/ucx_buffers.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dls::actors {

using configure_atom = caf::atom_constant<caf::atom("configure")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using admit_atom = caf::atom_constant<caf::atom("admit")>;
using evict_atom = caf::atom_constant<caf::atom("evict")>;
using drop_atom = caf::atom_constant<caf::atom("drop")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using adopt_atom = caf::atom_constant<caf::atom("adopt")>;
using handover_atom = caf::atom_constant<caf::atom("handover")>;
using kv_landed_atom = caf::atom_constant<caf::atom("kv_landed")>;
using keep_atom = caf::atom_constant<caf::atom("keep")>;  // a peer's snapshot landed (UCX thread -> agent)
using wired_atom = caf::atom_constant<caf::atom("wired")>;  // a wireup pong landed or its ping failed (UCX thread -> agent)
using report_atom = caf::atom_constant<caf::atom("report")>;  // a TP group's notes of policy state are due (group -> itself)

/// Which shard a worker computes from now on. A new collective per TP group.
struct shard_setup {
  int rank = 0;
  int world = 1;
  std::shared_ptr<group_link> link;
};

struct step_order {
  step_order() = default;
  step_order(std::vector<uint64_t> which, std::vector<double> taus = {}) : ids(std::move(which)), tau(std::move(taus)) {}
  std::vector<uint64_t> ids;
  std::vector<double> tau;  // per id: the threshold this step decodes it at (empty: keep)
};

/// What rank 0 reports for one request after a step. Every rank holds identical
/// canvases, so one rank's view is the group's view.
struct step_outcome {
  uint64_t id = 0;
  gpu::step_report report;
  bool boundary = false;  // the next step is a refresh: the canvas alone can move
  int32_t block = 0;
  int64_t steps = 0;
  int64_t committed = 0;
  canvas_progress progress;     // what the policies read of the canvas after this step
  std::string canvas;           // set when a block completed at a refresh boundary (the snapshot)
  std::vector<int32_t> answer;  // set when a block completed or the request finished
};

struct step_result {
  std::vector<step_outcome> outcomes;  // rank 0 only
  std::string error;
  double seconds = 0;  // inside engine::step on this worker
};

struct canvas_bundle {
  std::vector<std::pair<uint64_t, std::string>> canvases;
};

/// One request's slot as a worker gives it up for a migration: canvas, KV cache and the canvas
/// its last refresh ran on (what a rebuild of the cache starts from). Moved by ownership.
struct held_slot {
  gpu::request_slot slot;
  std::optional<gpu::canvas> refresh_input;
};
using held_slot_ptr = std::shared_ptr<held_slot>;

/// A request handed from one TP group to another of the same process, mid-block: every
/// rank's slot (KV cache included) moves to the same rank of the destination, no copy.
struct group_handover {
  runtime::work_item meta;          // age, deadline and tau as they are now; no canvas
  std::vector<held_slot_ptr> slots; // rank order
  canvas_progress progress;
  int64_t committed = 0;
  int64_t steps = 0;
  answer_text text;  // the answer decoded so far
  int32_t streamed_blocks = 0;
  std::string from;
};

}  // namespace dls::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::actors::shard_setup)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::actors::step_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::actors::step_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::actors::canvas_bundle)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::actors::held_slot_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::actors::group_handover)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dls::runtime::ucx_payload)
