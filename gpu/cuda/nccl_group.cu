// NCCL communicators of a TP group. A group is immutable: split and merge destroy it and build
// new ones, so no communicator outlives the group it was made for.
#include "gpu/cuda/nccl.cuh"

#if DLS_HAVE_NCCL
#include <nccl.h>
#endif

#include <cstring>

#if DLS_HAVE_NCCL
#define DLS_NCCL(call) ::dls::gpu::cuda::check_nccl((call), #call, __FILE__, __LINE__)
#endif

namespace dls::gpu {

#if DLS_HAVE_NCCL
namespace cuda {
namespace {
void check_nccl(ncclResult_t r, const char* call, const char* file, int line) {
  if (r != ncclSuccess) fail(call, file, line, std::string("NCCL error ") + std::to_string(static_cast<int>(r)) + ": " +
                                                   ncclGetErrorString(r));
}
}  // namespace
}  // namespace cuda
#endif

struct nccl_group::impl {
  int world = 0;
  std::vector<int> ranks;    // local ranks, in the order of devices and comms
  std::vector<int> devices;
#if DLS_HAVE_NCCL
  std::vector<ncclComm_t> comms;
#endif
  int index(int rank) const {
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == rank) return static_cast<int>(i);
    return -1;
  }
};

#if !DLS_HAVE_NCCL
namespace {
[[noreturn]] void no_nccl() { throw cuda_error("this build has no NCCL: GPU tensor parallelism is unavailable"); }
}  // namespace
#endif

bool nccl_group::available() { return DLS_HAVE_NCCL != 0; }

nccl_group::nccl_group(const std::vector<int>& devices) : p_(std::make_unique<impl>()) {
#if DLS_HAVE_NCCL
  if (devices.empty()) throw std::invalid_argument("nccl_group: no devices");
  const int n = cuda_device_count();
  for (int d : devices)
    if (d < 0 || d >= n) throw cuda_error("nccl_group: CUDA device " + std::to_string(d) + " does not exist");
  p_->world = static_cast<int>(devices.size());
  p_->devices = devices;
  p_->comms.resize(devices.size());
  for (int r = 0; r < p_->world; ++r) p_->ranks.push_back(r);
  DLS_NCCL(ncclCommInitAll(p_->comms.data(), p_->world, devices.data()));
#else
  (void)devices;
  no_nccl();
#endif
}

nccl_group::nccl_group(const std::string& unique_id, int world, int rank, int device) : p_(std::make_unique<impl>()) {
#if DLS_HAVE_NCCL
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) throw std::invalid_argument("nccl_group: malformed unique id");
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  if (world < 1 || rank < 0 || rank >= world) throw std::invalid_argument("nccl_group: bad rank or world");
  p_->world = world;
  p_->ranks = {rank};
  p_->devices = {device};
  p_->comms.resize(1);
  cuda::device_guard g(device);
  DLS_NCCL(ncclCommInitRank(&p_->comms[0], world, id, rank));
#else
  (void)unique_id, (void)world, (void)rank, (void)device;
  no_nccl();
#endif
}

nccl_group::~nccl_group() {
#if DLS_HAVE_NCCL
  for (std::size_t i = 0; i < p_->comms.size(); ++i) {
    if (!p_->comms[i]) continue;
    int prev = -1;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(p_->devices[i]);
    (void)ncclCommDestroy(p_->comms[i]);
    if (prev >= 0) (void)cudaSetDevice(prev);
  }
#endif
}

std::string nccl_group::make_unique_id() {
#if DLS_HAVE_NCCL
  ncclUniqueId id;
  DLS_NCCL(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
#else
  no_nccl();
#endif
}

int nccl_group::world() const { return p_->world; }
bool nccl_group::has_rank(int rank) const { return p_->index(rank) >= 0; }
int nccl_group::device(int rank) const {
  int i = p_->index(rank);
  if (i < 0) throw std::invalid_argument("nccl_group: rank " + std::to_string(rank) + " is not in this process");
  return p_->devices[static_cast<std::size_t>(i)];
}

namespace cuda {

void nccl_sum(const nccl_group& g, int rank, float* data, std::size_t n, cudaStream_t stream) {
#if DLS_HAVE_NCCL
  const auto& p = g.internals();
  int i = p.index(rank);
  if (i < 0) throw std::invalid_argument("nccl_sum: rank " + std::to_string(rank) + " is not in this process");
  DLS_NCCL(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, p.comms[static_cast<std::size_t>(i)], stream));
#else
  (void)g, (void)rank, (void)data, (void)n, (void)stream;
  no_nccl();
#endif
}

}  // namespace cuda
}  // namespace dls::gpu
