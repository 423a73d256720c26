#include "actors/device_pool.hpp"

#include "gpu/cpu_backend.hpp"
#if DLS_HAVE_CUDA
#include "gpu/cuda/cuda_backend.hpp"
#endif

#include <stdexcept>

namespace dls::actors {

std::shared_ptr<const device_pool> device_pool::open(const runtime::device_spec& devices,
                                                     std::shared_ptr<const gpu::model> m) {
  auto pool = std::make_shared<device_pool>();
  pool->kind_ = devices.kind;
  pool->model_ = std::move(m);
  if (devices.kind == "cpu") {
    for (int i = 0; i < devices.count; ++i) {
      pool->ids_.push_back(i);
      pool->names_.push_back("cpu:" + std::to_string(i));
    }
    return pool;
  }
  if (devices.kind != "cuda") throw std::runtime_error("unknown device kind '" + devices.kind + "'");
#if DLS_HAVE_CUDA
  const int present = gpu::cuda_device_count();
  for (int id : devices.ids)
    if (id >= present)
      throw std::runtime_error("devices.kind cuda lists device " + std::to_string(id) + ", but this machine has " +
                               std::to_string(present) + " usable CUDA device" + (present == 1 ? "" : "s"));
  for (int id : devices.ids) {
    pool->ids_.push_back(id);
    pool->names_.push_back("cuda:" + std::to_string(id) + " " + gpu::cuda_device_description(id));
    try {
      pool->weights_.push_back(gpu::upload_weights(*pool->model_, id));
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot upload the model to cuda:" + std::to_string(id) + ": " + e.what());
    }
  }
  if (devices.ids.size() > 1 && !gpu::nccl_group::available())
    pool->names_.back() += " (no NCCL in this build: TP groups of one device only)";
  return pool;
#else
  throw std::runtime_error("devices.kind cuda needs the CUDA backend, and this build has none "
                           "(build with nvcc in /usr/local/cuda and -DDLS_WITH_CUDA=ON)");
#endif
}

std::string device_pool::describe(int slot) const { return names_.at(static_cast<std::size_t>(slot)); }

std::shared_ptr<group_link> device_pool::link_for(const std::vector<int>& slots) const {
  auto link = std::make_shared<group_link>();
  link->world = static_cast<int>(slots.size());
  if (kind_ == "cpu") {
    link->shm = std::make_shared<gpu::shm_allreduce_group>(link->world);
    return link;
  }
#if DLS_HAVE_CUDA
  if (link->world > 1) {
    if (!gpu::nccl_group::available())
      throw std::runtime_error("a TP group of " + std::to_string(link->world) +
                               " GPUs needs NCCL, and this build has none");
    std::vector<int> ids;
    for (int s : slots) ids.push_back(ids_.at(static_cast<std::size_t>(s)));
    link->nccl = std::make_shared<gpu::nccl_group>(ids);
  }
#endif
  return link;
}

std::string device_pool::cannot_decode(const gpu::decode_params& p) const {
  if (kind_ == "cpu") return "";
  // The CUDA backend proposes top-1 probabilities only (backend::scores, backend::truncates).
  if (gpu::score_of(p.rule) != gpu::proposal_score::probability)
    return std::string("the cuda backend cannot rank by the ") + gpu::to_string(p.rule) + " rule's score";
  if (p.truncates()) return "the cuda backend cannot truncate distributions by top_p / top_k";
  return "";
}

std::unique_ptr<gpu::backend> device_pool::make_backend(int slot, int rank, const group_link& link,
                                                        std::unique_ptr<gpu::allreduce>& endpoint) const {
  const gpu::shard_spec shard{rank, link.world};
  if (kind_ == "cpu") {
    endpoint = link.world > 1 ? link.shm->endpoint(rank) : nullptr;
    return gpu::make_cpu_backend(model_, shard, endpoint.get());
  }
#if DLS_HAVE_CUDA
  gpu::cuda_backend_options o;
  o.shard = shard;
  o.group = link.nccl.get();
  return gpu::make_cuda_backend(weights_.at(static_cast<std::size_t>(slot)), o);
#else
  (void)slot;
  throw std::runtime_error("no CUDA backend in this build");
#endif
}

}  // namespace dls::actors
