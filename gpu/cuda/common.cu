#include "gpu/cuda/common.cuh"

#include <cstdio>
#include <sstream>

namespace dls::gpu {

int cuda_device_count() noexcept {
  int n = 0;
  // No GPU: cudaErrorNoDevice; no or too old a driver: cudaErrorInsufficientDriver and kin.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // reset the last-error state so later calls start clean
    return 0;
  }
  return n;
}

std::string cuda_device_description(int device) {
  cudaDeviceProp p{};
  DLS_CUDA(cudaGetDeviceProperties(&p, device));
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << p.name << " (sm_" << p.major << p.minor << ", " << p.multiProcessorCount << " SMs, "
     << static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0) << " GiB)";
  return os.str();
}

}  // namespace dls::gpu

namespace dls::gpu::cuda {

void fail(const std::string& call, const char* file, int line, const std::string& what) {
  throw cuda_error(call + " failed at " + file + ":" + std::to_string(line) + ": " + what);
}

device_guard::device_guard(int device) : dev_(device) {
  DLS_CUDA(cudaGetDevice(&prev_));
  if (prev_ != device) DLS_CUDA(cudaSetDevice(device));
}

device_guard::~device_guard() {
  if (prev_ >= 0 && prev_ != dev_) (void)cudaSetDevice(prev_);
}

// -- pool ------------------------------------------------------------------------------------

device_pool::device_pool(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

device_pool::~device_pool() { trim(); }

std::size_t device_pool::round(std::size_t bytes) {
  constexpr std::size_t small = 256, large = std::size_t{2} << 20;
  if (bytes == 0) bytes = 1;
  if (bytes >= (std::size_t{1} << 20)) return (bytes + large - 1) / large * large;
  return (bytes + small - 1) / small * small;
}

void* device_pool::allocate(std::size_t bytes) {
  bytes = round(bytes);
  {
    // Reuse a cached block of exactly this (rounded) size.
    std::lock_guard<std::mutex> lk(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      void* p = it->second;
      free_.erase(it);
      cached_ -= bytes;
      in_use_ += bytes;
      return p;
    }
  }
  device_guard g(device_);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    trim();
    e = cudaMalloc(&p, bytes);
  }
  check(e, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(), __FILE__, __LINE__);
  std::lock_guard<std::mutex> lk(mu_);
  in_use_ += bytes;
  return p;
}

void device_pool::release(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  bytes = round(bytes);
  int prev = -1;
  (void)cudaGetDevice(&prev);
  if (prev != device_) (void)cudaSetDevice(device_);
  // Queued work may still read or write the block.
  cudaError_t e = stream_ ? cudaStreamSynchronize(stream_) : cudaDeviceSynchronize();
  if (prev >= 0 && prev != device_) (void)cudaSetDevice(prev);
  std::lock_guard<std::mutex> lk(mu_);
  in_use_ -= bytes;
  if (e != cudaSuccess) {
    // The device is in an error state (or the runtime is shutting down at exit): do not
    // recycle the block, leak it rather than risk reuse.
    if (e != cudaErrorCudartUnloading)
      std::fprintf(stderr, "dls cuda pool: synchronise before release failed: %s\n", cudaGetErrorString(e));
    return;
  }
  free_.emplace(bytes, p);
  cached_ += bytes;
}

void device_pool::trim() noexcept {
  std::multimap<std::size_t, void*> blocks;
  {
    std::lock_guard<std::mutex> lk(mu_);
    blocks.swap(free_);
    cached_ = 0;
  }
  if (blocks.empty()) return;
  int prev = -1;
  (void)cudaGetDevice(&prev);
  if (prev != device_) (void)cudaSetDevice(device_);
  for (auto& [n, p] : blocks) (void)cudaFree(p);
  if (prev >= 0 && prev != device_) (void)cudaSetDevice(prev);
}

std::size_t device_pool::bytes_in_use() const {
  std::lock_guard<std::mutex> lk(mu_);
  return in_use_;
}

std::size_t device_pool::bytes_cached() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cached_;
}

// -- buffer ----------------------------------------------------------------------------------

device_buffer::device_buffer(std::shared_ptr<device_pool> pool, std::size_t bytes) : pool_(std::move(pool)) {
  grow(bytes);
}

device_buffer::device_buffer(device_buffer&& o) noexcept
    : pool_(std::move(o.pool_)), p_(o.p_), bytes_(o.bytes_) {
  o.p_ = nullptr;
  o.bytes_ = 0;
}

device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = std::move(o.pool_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void device_buffer::grow(std::size_t bytes) {
  if (bytes <= bytes_ && p_) return;
  if (!pool_) throw std::logic_error("device_buffer without a pool");
  reset();
  p_ = pool_->allocate(bytes);
  bytes_ = device_pool::round(bytes);
}

void device_buffer::reset() noexcept {
  if (p_ && pool_) pool_->release(p_, bytes_);
  p_ = nullptr;
  bytes_ = 0;
}

// -- context ---------------------------------------------------------------------------------

device_context::device_context(int dev) : device(dev) {
  if (dev < 0 || dev >= cuda_device_count())
    throw cuda_error("CUDA device " + std::to_string(dev) + " does not exist (" +
                     std::to_string(cuda_device_count()) + " visible)");
  device_guard g(dev);
  DLS_CUDA(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev));
  DLS_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DLS_CUDA(cublasCreate(&blas));
  DLS_CUDA(cublasSetStream(blas, stream));
  pool = std::make_shared<device_pool>(dev, stream);
  blas_workspace = device_buffer(pool, std::size_t{32} << 20);
  DLS_CUDA(cublasSetWorkspace(blas, blas_workspace.get(), blas_workspace.bytes()));
}

device_context::~device_context() {
  int prev = -1;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(device);
  (void)cudaStreamSynchronize(stream);
  if (blas) (void)cublasDestroy(blas);
  blas_workspace.reset();
  pool->trim();
  pool.reset();
  if (stream) (void)cudaStreamDestroy(stream);
  if (prev >= 0) (void)cudaSetDevice(prev);
}

}  // namespace dls::gpu::cuda
