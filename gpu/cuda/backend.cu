// The CUDA backend: the CPU backend's forward (gpu/cpu_backend.cpp) on the device. Query rows
// [q0, q1) of each request attend to all key rows of its cache; fresh K/V land in cache rows
// [q0, q1) first. Logits only for the rows that need them, reduced on the device to
// (token, confidence); the shared canvas::apply picks the commits on the host.
#include "gpu/cuda/kernels.cuh"
#include "gpu/cuda/nccl.cuh"
#include "gpu/dtype.hpp"
#include "gpu/kv_wire.hpp"
#include "gpu/layer_segments.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>

namespace dls::gpu {

namespace {

using cuda::bf16;
using cuda::device_buffer;
using cuda::device_context;
using cuda::device_guard;

/// Page-locked host memory for the per-step upload and download.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  ~pinned_buffer() {
    if (p_) (void)cudaFreeHost(p_);
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  void grow(std::size_t bytes) {
    if (bytes <= n_) return;
    if (p_) DLS_CUDA(cudaFreeHost(p_));
    p_ = nullptr;
    n_ = 0;
    DLS_CUDA(cudaMallocHost(&p_, bytes));
    n_ = bytes;
  }
  unsigned char* get() const { return static_cast<unsigned char*>(p_); }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

// -- KV cache --------------------------------------------------------------------------------

/// K and V of one request on one shard, bf16 [layer][row][width] each, in device memory from
/// the owning backend's pool. Exports in the CPU cache's format (three int32 dims, then K and
/// V as f32), so caches migrate between CPU and CUDA workers.
class cuda_kv_cache final : public kv_cache {
 public:
  explicit cuda_kv_cache(std::shared_ptr<device_context> ctx)
      : ctx_(std::move(ctx)), k_(ctx_->pool), v_(ctx_->pool), carry_(ctx_->pool) {}

  const device_context* context() const { return ctx_.get(); }
  bf16* k() const { return k_.as<bf16>(); }
  bf16* v() const { return v_.as<bf16>(); }
  std::size_t count() const {
    return static_cast<std::size_t>(layers_) * static_cast<std::size_t>(rows_) * static_cast<std::size_t>(width_);
  }

  /// Sizes the cache for a canvas; a change of shape starts from zeros (as the CPU cache).
  void ensure(int layers, int rows, int width) {
    if (layers == layers_ && rows == rows_ && width == width_ && (count() == 0 || k_.get())) return;
    device_guard g(ctx_->device);
    k_.reset();
    v_.reset();
    layers_ = layers;
    rows_ = rows;
    width_ = width;
    const std::size_t bytes = count() * sizeof(bf16);
    if (bytes == 0) return;
    k_.grow(bytes);
    v_.grow(bytes);
    DLS_CUDA(cudaMemsetAsync(k_.get(), 0, bytes, ctx_->stream));
    DLS_CUDA(cudaMemsetAsync(v_.get(), 0, bytes, ctx_->stream));
  }

  std::size_t bytes() const override { return 2 * count() * sizeof(bf16) + carry_.bytes(); }

  // A split refresh's f32 hidden states between its layer ranges, and the layer they resume at.
  float* carry(std::size_t floats) {
    carry_.grow(floats * sizeof(float));
    carry_floats_ = floats;
    return carry_.as<float>();
  }
  float* carry() const { return carry_.as<float>(); }
  std::size_t carry_floats() const { return carry_floats_; }
  int carry_layer = 0;
  void drop_carry() noexcept {
    carry_.reset();
    carry_floats_ = 0;
    carry_layer = 0;
  }

  // bf16 on the wire as on the device: no conversion, half the bytes of f32.
  std::string export_bytes() const override {
    device_guard g(ctx_->device);
    const kv_dims d{layers_, rows_, width_, kv_dtype::bf16};
    std::string out = kv_wire_buffer(d);
    if (d.count()) {
      char* dst = &out[kv_header_bytes];
      DLS_CUDA(cudaMemcpyAsync(dst, k_.get(), d.plane_bytes(), cudaMemcpyDeviceToHost, ctx_->stream));
      DLS_CUDA(cudaMemcpyAsync(dst + d.plane_bytes(), v_.get(), d.plane_bytes(), cudaMemcpyDeviceToHost, ctx_->stream));
      DLS_CUDA(cudaStreamSynchronize(ctx_->stream));
    }
    return out;
  }

  void import_bytes(std::string_view bytes) override {
    const kv_dims d = parse_kv_wire(bytes);
    const std::size_t n = d.count();
    layers_ = rows_ = width_ = -1;  // force a fresh allocation
    ensure(d.layers, d.rows, d.width);
    if (!n) return;
    device_guard g(ctx_->device);
    if (d.dtype == kv_dtype::bf16) {  // straight from the wire buffer
      const char* src = bytes.data() + kv_header_bytes;
      DLS_CUDA(cudaMemcpyAsync(k_.get(), src, d.plane_bytes(), cudaMemcpyHostToDevice, ctx_->stream));
      DLS_CUDA(cudaMemcpyAsync(v_.get(), src + d.plane_bytes(), d.plane_bytes(), cudaMemcpyHostToDevice, ctx_->stream));
      DLS_CUDA(cudaStreamSynchronize(ctx_->stream));  // the caller may drop the bytes on return
      return;
    }
    std::vector<uint16_t> hk(n), hv(n);  // an f32 cache (from the CPU backend) rounds to bf16
    read_kv_plane(bytes, d, 0, hk.data());
    read_kv_plane(bytes, d, 1, hv.data());
    DLS_CUDA(cudaMemcpyAsync(k_.get(), hk.data(), n * sizeof(bf16), cudaMemcpyHostToDevice, ctx_->stream));
    DLS_CUDA(cudaMemcpyAsync(v_.get(), hv.data(), n * sizeof(bf16), cudaMemcpyHostToDevice, ctx_->stream));
    DLS_CUDA(cudaStreamSynchronize(ctx_->stream));  // the host vectors die here
  }

 private:
  std::shared_ptr<device_context> ctx_;
  device_buffer k_, v_, carry_;
  std::size_t carry_floats_ = 0;
  int layers_ = 0, rows_ = 0, width_ = 0;
};

// -- backend ---------------------------------------------------------------------------------

std::size_t align16(std::size_t n) { return (n + 15) / 16 * 16; }

class cuda_backend final : public backend {
 public:
  cuda_backend(std::shared_ptr<const cuda_weights> w, const cuda_backend_options& o)
      : ctx_(std::make_shared<device_context>(w ? w->device : 0)), w_(std::move(w)), opt_(o) {
    const auto& c = w_->config;
    const auto s = o.shard;
    const shard_slice sl = slice_for(c, s);  // validates the shard before the group is consulted
    if (s.world > 1) {
      if (!o.group || o.group->world() != s.world)
        throw std::invalid_argument("TP degree > 1 needs an nccl_group of the same world size");
      if (!o.group->has_rank(s.rank) || o.group->device(s.rank) != w_->device)
        throw std::invalid_argument("the nccl_group's rank " + std::to_string(s.rank) + " is not on device " +
                                    std::to_string(w_->device));
    }
    hd_ = c.head_dim();
    sl_ = sl;
    impl_ = cuda::resolve_attention(o.attention, hd_);
    // Without TP the o and down GEMMs add their output to the residual stream in their
    // epilogue (beta = 1), saving a pass of the norm kernels over f32 rows; a TP rank's output
    // is a partial sum that must be all-reduced first.
    residual_in_gemm_ = s.world == 1;
    // One GEMM for Q, K and V (and one for gate and up) when this shard takes whole matrices
    // and they lie back to back in the weight block, as upload order leaves them: wider GEMMs
    // fill the GPU better, most of all for a reuse step's 32 rows.
    const std::size_t d = static_cast<std::size_t>(c.d_model), kv = static_cast<std::size_t>(c.kv_dim()),
                      qrows = static_cast<std::size_t>(c.n_heads) * static_cast<std::size_t>(hd_),
                      ff = static_cast<std::size_t>(c.mlp_hidden);
    fused_qkv_ = sl_.heads == c.n_heads && sl_.kv_heads == c.n_kv_heads;
    fused_gate_up_ = sl_.f0 == 0 && sl_.f1 == c.mlp_hidden;
    for (const auto& l : w_->layers) {
      fused_qkv_ = fused_qkv_ && l.k == l.q + qrows * d && l.v == l.k + kv * d;
      fused_gate_up_ = fused_gate_up_ && l.up == l.gate + ff * d;
    }
    device_guard g(ctx_->device);
    for (auto* b : {&x_, &y_, &h_, &qkv_, &qb_, &ob_, &gu_, &part_o_, &part_ml_, &z_, &logits_, &props_, &desc_,
                    &inv_freq_, &xs_, &ys_})
      *b = device_buffer(ctx_->pool);
    // theta^(-2i/hd) exactly as the CPU's rope() computes it.
    std::vector<float> inv(static_cast<std::size_t>(hd_ / 2));
    for (int i = 0; i < hd_ / 2; ++i)
      inv[static_cast<std::size_t>(i)] = static_cast<float>(
          1.0 / std::pow(static_cast<double>(c.rope_theta), (2.0 * i) / static_cast<double>(hd_)));
    inv_freq_.grow(inv.size() * sizeof(float));
    DLS_CUDA(cudaMemcpy(inv_freq_.get(), inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
  }

  ~cuda_backend() override {
    int prev = -1;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(ctx_->device);
    (void)cudaStreamSynchronize(ctx_->stream);
    drop_graphs();
    for (auto e : events_) (void)cudaEventDestroy(e);
    if (prev >= 0) (void)cudaSetDevice(prev);
  }

  std::string name() const override { return "cuda"; }
  shard_spec shard() const override { return opt_.shard; }
  int layers() const override { return w_->config.n_layers; }
  int logit_shift() const override { return w_->config.logit_shift; }
  std::unique_ptr<kv_cache> make_cache() override { return std::make_unique<cuda_kv_cache>(ctx_); }

  void forward(const std::vector<forward_item>& items, std::vector<std::vector<row_proposal>>& proposals) override {
    device_guard g(ctx_->device);
    prepare(items, false);
    const int M = static_cast<int>(logit_src_.size());
    run_step(M);
    proposals.assign(items.size(), {});
    if (M == 0) {
      DLS_CUDA(cudaStreamSynchronize(ctx_->stream));  // the caches are written when forward returns
      drop_finished_carries();
      return;
    }
    auto* dev = props_.as<cuda::proposal_dev>();
    host_props_.grow(sizeof(cuda::proposal_dev) * static_cast<std::size_t>(M));
    DLS_CUDA(cudaMemcpyAsync(host_props_.get(), dev, sizeof(cuda::proposal_dev) * static_cast<std::size_t>(M),
                             cudaMemcpyDeviceToHost, ctx_->stream));
    DLS_CUDA(cudaStreamSynchronize(ctx_->stream));
    drop_finished_carries();
    const auto* hp = reinterpret_cast<const cuda::proposal_dev*>(host_props_.get());
    for (int j = 0; j < M; ++j) {
      const auto& d = logit_host_[static_cast<std::size_t>(j)];
      proposals[logit_owner_[static_cast<std::size_t>(j)]].push_back({d.row, hp[j].token, hp[j].confidence});
    }
  }

  std::vector<float> logits(const canvas& cv, const step_plan& plan, kv_cache& cache) override {
    device_guard g(ctx_->device);
    std::vector<forward_item> items{{&cv, plan, &cache}};
    prepare(items, true);
    marks_.clear();
    mark(ph_count);
    run_layers();  // eager: this path serves tests and tools, not the step loop
    const int M = static_cast<int>(logit_src_.size());
    const std::size_t n = static_cast<std::size_t>(M) * static_cast<std::size_t>(w_->config.vocab_size);
    std::vector<float> out(n);
    if (M == 0) return out;
    run_head(M);
    DLS_CUDA(cudaMemcpyAsync(out.data(), logits_.get(), n * sizeof(float), cudaMemcpyDeviceToHost, ctx_->stream));
    DLS_CUDA(cudaStreamSynchronize(ctx_->stream));
    drop_finished_carries();
    return out;
  }

 private:
  // Builds the step's tables on the host, sizes the workspace and uploads the tables in one copy.
  void prepare(const std::vector<forward_item>& items, bool all_rows) {
    const auto& c = w_->config;
    const int kvs = sl_.kv_heads * hd_;
    // The pinned tables may still feed an earlier step's upload.
    DLS_CUDA(cudaStreamSynchronize(ctx_->stream));
    tok_.clear();
    pos_.clear();
    row_item_.clear();
    item_desc_.clear();
    tiles_.clear();
    logit_src_.clear();
    logit_host_.clear();
    logit_owner_.clear();
    ranges_.clear();
    item_off_.clear();
    caches_.clear();
    segments_.clear();
    split_ = false;
    int R = 0, max_l = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& it = items[i];
      const auto& p = it.plan;
      if (!it.c) throw std::invalid_argument("forward item without a canvas");
      const canvas& cv = *it.c;
      if (p.q0 < 0 || p.q1 > cv.length() || p.q0 >= p.q1) throw std::invalid_argument("bad step plan");
      const auto [l0, l1] = plan_layers(p, c.n_layers);
      const bool partial = l0 > 0 || l1 < c.n_layers;
      if (all_rows && l1 < c.n_layers) throw std::invalid_argument("logits need a step plan that runs through the last layer");
      split_ = split_ || partial;
      ranges_.push_back({l0, l1});
      item_off_.push_back(R);
      auto* cache = dynamic_cast<cuda_kv_cache*>(it.cache);
      if (!cache || cache->context() != ctx_.get())
        throw std::invalid_argument("forward item " + std::to_string(i) +
                                    ": its KV cache was not made by this CUDA backend");
      cache->ensure(c.n_layers, cv.length(), kvs);
      caches_.push_back(cache);
      const int T = p.query_rows();
      if (p.layer0 > 0 &&
          (cache->carry_layer != p.layer0 || cache->carry_floats() != static_cast<std::size_t>(T) * c.d_model))
        throw std::invalid_argument("split refresh resumes at layer " + std::to_string(p.layer0) +
                                    " but its cache holds layer " + std::to_string(cache->carry_layer));
      cuda::item_desc d;
      d.q_off = R;
      d.T = T;
      d.q0 = p.q0;
      d.L = cv.length();
      d.k = cache->k();
      d.v = cache->v();
      item_desc_.push_back(d);
      max_l = std::max(max_l, d.L);
      for (int r = p.q0; r < p.q1; ++r) {
        const int32_t id = cv.ids[static_cast<std::size_t>(r)];
        if (id < 0 || id >= c.vocab_size) throw std::invalid_argument("token id out of the vocabulary");
        tok_.push_back(id);
        pos_.push_back(r);
        row_item_.push_back(static_cast<int32_t>(i));
      }
      auto add_logit_row = [&](int from, int r) {
        cuda::logit_desc ld;
        ld.src = R + (from - p.q0);
        ld.row = r;
        ld.suppressed = cv.mask_id;
        ld.temperature = cv.params.temperature;
        ld.score_temperature = score_temperature(sampler_of(c.arch), cv.params.temperature);
        ld.seed = cv.params.seed;
        ld.counter = static_cast<uint64_t>(cv.steps);
        logit_src_.push_back(ld.src);
        logit_host_.push_back(ld);
        logit_owner_.push_back(i);
      };
      if (all_rows) {
        for (int r = p.q0; r < p.q1; ++r) add_logit_row(r, r);
      } else if (l1 == c.n_layers) {  // a split refresh's inner range has no logits
        // With Dream's shift, row r - 1's logits propose token r: the plan must have computed it.
        const int shift = c.logit_shift;
        for (int r = p.block0; r < p.block1; ++r) {
          if (cv.ids[static_cast<std::size_t>(r)] != cv.mask_id) continue;
          const int from = r - shift;
          if (from < p.q0 || from >= p.q1)
            throw std::invalid_argument("step plan rows [" + std::to_string(p.q0) + ", " + std::to_string(p.q1) +
                                        ") lack row " + std::to_string(from) + ", whose logits propose token " +
                                        std::to_string(r));
          add_logit_row(from, r);
        }
      }
      R += T;
    }
    rows_ = R;
    int max_t = 0;
    for (const auto& d : item_desc_) max_t = std::max(max_t, static_cast<int>(d.T));
    tile_rows_ = cuda::attention_tile_rows(impl_, max_t);
    for (std::size_t i = 0; i < item_desc_.size(); ++i)
      for (int t0 = 0; t0 < item_desc_[i].T; t0 += tile_rows_) tiles_.push_back({static_cast<int32_t>(i), t0});
    n_tiles_ = static_cast<int>(tiles_.size());
    splits_ = choose_splits(n_tiles_, max_l);
    int max_splits = splits_;
    if (split_) max_splits = std::max(max_splits, plan_segments());

    // One upload: tok, pos, row_item, items, tiles, logit src, logit descs (16-byte aligned).
    const std::size_t n_items = item_desc_.size(), M = logit_src_.size(), Rz = static_cast<std::size_t>(R);
    off_tok_ = 0;
    off_pos_ = off_tok_ + align16(Rz * 4);
    off_row_item_ = off_pos_ + align16(Rz * 4);
    off_items_ = off_row_item_ + align16(Rz * 4);
    off_tiles_ = off_items_ + align16(n_items * sizeof(cuda::item_desc));
    off_src_ = off_tiles_ + align16(tiles_.size() * sizeof(cuda::tile_desc));
    off_logit_ = off_src_ + align16(M * 4);
    std::size_t total = off_logit_ + align16(M * sizeof(cuda::logit_desc));
    for (auto& g : segments_) {
      const auto rows = static_cast<std::size_t>(g.rows);
      g.off_pos = total;
      g.off_row_item = g.off_pos + align16(rows * 4);
      g.off_items = g.off_row_item + align16(rows * 4);
      g.off_tiles = g.off_items + align16(static_cast<std::size_t>(g.n_items) * sizeof(cuda::item_desc));
      total = g.off_tiles + align16(static_cast<std::size_t>(g.n_tiles) * sizeof(cuda::tile_desc));
    }
    host_desc_.grow(total);
    auto* h = host_desc_.get();
    std::memcpy(h + off_tok_, tok_.data(), Rz * 4);
    std::memcpy(h + off_pos_, pos_.data(), Rz * 4);
    std::memcpy(h + off_row_item_, row_item_.data(), Rz * 4);
    std::memcpy(h + off_items_, item_desc_.data(), n_items * sizeof(cuda::item_desc));
    std::memcpy(h + off_tiles_, tiles_.data(), tiles_.size() * sizeof(cuda::tile_desc));
    std::memcpy(h + off_src_, logit_src_.data(), M * 4);
    std::memcpy(h + off_logit_, logit_host_.data(), M * sizeof(cuda::logit_desc));
    for (const auto& g : segments_) {
      const auto rows = static_cast<std::size_t>(g.rows);
      std::memcpy(h + g.off_pos, seg_pos_.data() + g.first_row, rows * 4);
      std::memcpy(h + g.off_row_item, seg_row_item_.data() + g.first_row, rows * 4);
      std::memcpy(h + g.off_items, seg_items_.data() + g.first_item, static_cast<std::size_t>(g.n_items) * sizeof(cuda::item_desc));
      std::memcpy(h + g.off_tiles, seg_tiles_.data() + g.first_tile, static_cast<std::size_t>(g.n_tiles) * sizeof(cuda::tile_desc));
    }
    desc_.grow(total);
    DLS_CUDA(cudaMemcpyAsync(desc_.get(), h, total, cudaMemcpyHostToDevice, ctx_->stream));

    // Workspace for R rows (grows only).
    const std::size_t d = static_cast<std::size_t>(c.d_model), qs = static_cast<std::size_t>(sl_.heads * hd_),
                      kv = static_cast<std::size_t>(kvs), fs = static_cast<std::size_t>(sl_.f1 - sl_.f0);
    x_.grow(Rz * d * sizeof(float));
    y_.grow(Rz * d * sizeof(float));
    h_.grow(Rz * d * sizeof(bf16));
    qkv_.grow(Rz * (qs + 2 * kv) * sizeof(float));
    qb_.grow(Rz * qs * sizeof(bf16));
    ob_.grow(Rz * qs * sizeof(bf16));
    gu_.grow(Rz * 2 * fs * sizeof(bf16));
    if (max_splits > 1) {
      part_o_.grow(static_cast<std::size_t>(max_splits) * Rz * qs * sizeof(float));
      part_ml_.grow(static_cast<std::size_t>(max_splits) * Rz * static_cast<std::size_t>(sl_.heads) * 2 * sizeof(float));
    }
    if (split_) {  // compact copies of the rows that run a segment of layers
      xs_.grow(Rz * d * sizeof(float));
      ys_.grow(Rz * d * sizeof(float));
    }
    if (M) {
      z_.grow(M * d * sizeof(bf16));
      logits_.grow(M * static_cast<std::size_t>(c.vocab_size) * sizeof(float));
      props_.grow(M * sizeof(cuda::proposal_dev));
    }
  }

  // A step with layer-split refreshes runs as segments of layers over which the set of items
  // running them does not change; each segment gets its own compact row tables. Returns the
  // most key splits any segment uses.
  int plan_segments() {
    seg_pos_.clear();
    seg_row_item_.clear();
    seg_items_.clear();
    seg_tiles_.clear();
    int most = 1;
    for (const auto& piece : plan_layer_segments(ranges_, w_->config.n_layers)) {
      segment g;
      g.l0 = piece.l0;
      g.l1 = piece.l1;
      g.all = piece.all;
      g.first_row = seg_pos_.size();
      g.first_item = seg_items_.size();
      g.first_tile = seg_tiles_.size();
      int max_t = 0, max_l = 0;
      for (std::size_t i : piece.items) {
        cuda::item_desc d = item_desc_[i];
        g.moves.push_back({item_off_[i], g.rows, static_cast<int>(d.T)});
        d.q_off = g.rows;
        for (int t = 0; t < d.T; ++t) {
          seg_pos_.push_back(pos_[static_cast<std::size_t>(item_off_[i] + t)]);
          seg_row_item_.push_back(g.n_items);
        }
        seg_items_.push_back(d);
        g.rows += d.T;
        g.n_items += 1;
        max_t = std::max(max_t, static_cast<int>(d.T));
        max_l = std::max(max_l, static_cast<int>(d.L));
      }
      g.tile_rows = cuda::attention_tile_rows(impl_, max_t);
      for (int j = 0; j < g.n_items; ++j)
        for (int t0 = 0; t0 < seg_items_[g.first_item + static_cast<std::size_t>(j)].T; t0 += g.tile_rows)
          seg_tiles_.push_back({static_cast<int32_t>(j), t0});
      g.n_tiles = static_cast<int>(seg_tiles_.size() - g.first_tile);
      g.splits = cuda::choose_kv_splits(g.n_tiles, g.tile_rows, sl_.heads, max_l, ctx_->sm_count, opt_.max_kv_splits);
      most = std::max(most, g.splits);
      segments_.push_back(std::move(g));
    }
    return most;
  }

  // A split refresh that reached its last layer frees its hidden states; only after the stream
  // has finished with them.
  void drop_finished_carries() {
    for (std::size_t i = 0; i < ranges_.size(); ++i)
      if (ranges_[i].first > 0 && ranges_[i].second == w_->config.n_layers) caches_[i]->drop_carry();
  }

  int choose_splits(int n_tiles, int max_l) const {
    return cuda::choose_kv_splits(n_tiles, tile_rows_, sl_.heads, max_l, ctx_->sm_count, opt_.max_kv_splits);
  }

  const int32_t* desc_i32(std::size_t off) const {
    return reinterpret_cast<const int32_t*>(desc_.as<unsigned char>() + off);
  }
  const cuda::logit_desc* desc_logits() const {
    return reinterpret_cast<const cuda::logit_desc*>(desc_.as<unsigned char>() + off_logit_);
  }

  void gemm(const bf16* x, int rows, int in, int ldx, const bf16* w, int out, int ldw, void* y, cudaDataType yt,
            int ldy, bool accumulate = false) {
    cuda::gemm_xwt(ctx_->blas, x, rows, in, ldx, w, out, ldw, y, yt, ldy, accumulate);
  }

  void reduce(float* y, std::size_t n) {
    // residual_in_gemm_ is false whenever this sums: each rank's partial output goes to y.
    if (opt_.shard.world > 1) cuda::nccl_sum(*opt_.group, opt_.shard.rank, y, n, ctx_->stream);
  }

  // The row tables one pass over a range of layers reads.
  struct pass {
    const int32_t* pos;
    const int32_t* row_item;
    const cuda::item_desc* items;
    const cuda::tile_desc* tiles;
    int rows, n_tiles, tile_rows, splits;
  };

  void run_layers() {
    const auto& c = w_->config;
    cuda::embed(desc_i32(off_tok_), rows_, w_->wte, c.d_model, x_.as<float>(), ctx_->stream);
    mark(ph_embed);
    if (split_) {
      run_split_layers();
      return;
    }
    const pass p{desc_i32(off_pos_), desc_i32(off_row_item_),
                 reinterpret_cast<const cuda::item_desc*>(desc_.as<unsigned char>() + off_items_),
                 reinterpret_cast<const cuda::tile_desc*>(desc_.as<unsigned char>() + off_tiles_),
                 rows_, n_tiles_, tile_rows_, splits_};
    run_pass(p, 0, c.n_layers, x_.as<float>(), y_.as<float>());
    // Unless the down GEMM added it to x, y still holds the last MLP output; run_head adds it to
    // the rows it reads.
    head_adds_y_ = c.n_layers > 0 && !residual_in_gemm_;
  }

  // Layers [l0, l1) over the pass's rows of x (y: the all-reduced outputs before they join x).
  void run_pass(const pass& p, int l0, int l1, float* x, float* y) {
    const auto& c = w_->config;
    const int R = p.rows, d = c.d_model, qs = sl_.heads * hd_, kvs = sl_.kv_heads * hd_, fs = sl_.f1 - sl_.f0;
    const cudaStream_t s = ctx_->stream;
    bf16* h = h_.as<bf16>();
    // Q, K and V side by side in one f32 buffer [R, qs | kvs | kvs]; gate and up in one bf16
    // buffer [R, fs | fs], whose gate half then holds the SwiGLU output.
    const int ldqkv = qs + 2 * kvs, ldgu = 2 * fs;
    float* q = qkv_.as<float>();
    bf16* gu = gu_.as<bf16>();
    for (int l = l0; l < l1; ++l) {
      const auto& w = w_->layers[static_cast<std::size_t>(l)];
      // The previous layer's MLP output joins the residual stream here (or already did, in
      // the down GEMM's epilogue).
      cuda::add_rmsnorm(x, l == l0 || residual_in_gemm_ ? nullptr : y, w.attn_norm, h, R, d, c.rms_eps, s);
      mark(ph_norm);
      if (fused_qkv_) {
        gemm(h, R, d, d, w.q, ldqkv, d, q, CUDA_R_32F, ldqkv);
      } else {
        gemm(h, R, d, d, w.q + static_cast<std::size_t>(sl_.h0) * hd_ * d, qs, d, q, CUDA_R_32F, ldqkv);
        gemm(h, R, d, d, w.k + static_cast<std::size_t>(sl_.kvh0) * hd_ * d, kvs, d, q + qs, CUDA_R_32F, ldqkv);
        gemm(h, R, d, d, w.v + static_cast<std::size_t>(sl_.kvh0) * hd_ * d, kvs, d, q + qs + kvs, CUDA_R_32F, ldqkv);
      }
      mark(ph_qkv);
      // This rank's slices of the biases sit at its first query / KV head (null without bias).
      auto slice = [](const float* b, int first) { return b ? b + first : nullptr; };
      cuda::rope_scatter(q, q + qs, q + qs + kvs, ldqkv, p.pos, p.row_item, p.items, l, R, sl_.heads, sl_.kv_heads, hd_,
                         inv_freq_.as<float>(), qb_.as<bf16>(), s, slice(w.q_bias, sl_.h0 * hd_),
                         slice(w.k_bias, sl_.kvh0 * hd_), slice(w.v_bias, sl_.kvh0 * hd_));
      mark(ph_rope);
      cuda::attention(qb_.as<bf16>(), p.items, p.tiles, p.n_tiles, p.tile_rows, l, R, sl_.heads, sl_.kv_heads, hd_,
                      p.splits, impl_, part_o_.as<float>(), part_ml_.as<float>(), ob_.as<bf16>(), s);
      mark(ph_attention);
      gemm(ob_.as<bf16>(), R, qs, qs, w.o + static_cast<std::size_t>(sl_.h0) * hd_, d, d, residual_in_gemm_ ? x : y,
           CUDA_R_32F, d, residual_in_gemm_);
      mark(ph_o);
      reduce(y, static_cast<std::size_t>(R) * d);
      mark(ph_allreduce);
      cuda::add_rmsnorm(x, residual_in_gemm_ ? nullptr : y, w.ff_norm, h, R, d, c.rms_eps, s);
      mark(ph_norm);
      if (fused_gate_up_) {
        gemm(h, R, d, d, w.gate, ldgu, d, gu, CUDA_R_16BF, ldgu);
      } else {
        gemm(h, R, d, d, w.gate + static_cast<std::size_t>(sl_.f0) * d, fs, d, gu, CUDA_R_16BF, ldgu);
        gemm(h, R, d, d, w.up + static_cast<std::size_t>(sl_.f0) * d, fs, d, gu + fs, CUDA_R_16BF, ldgu);
      }
      mark(ph_gate_up);
      cuda::swiglu(gu, ldgu, gu + fs, ldgu, gu, ldgu, R, fs, s);
      mark(ph_swiglu);
      gemm(gu, R, fs, ldgu, w.down + sl_.f0, d, c.mlp_hidden, residual_in_gemm_ ? x : y, CUDA_R_32F, d,
           residual_in_gemm_);
      mark(ph_down);
      reduce(y, static_cast<std::size_t>(R) * d);
      mark(ph_allreduce);
    }
  }

  // A step with layer-split refreshes (docs/engine.md): carried rows resume from their cache,
  // each segment runs on its items' rows (gathered into xs when some items sit it out), and a
  // range that stops short of the last layer leaves its rows in its cache.
  void run_split_layers() {
    const auto& c = w_->config;
    const std::size_t d = static_cast<std::size_t>(c.d_model);
    const cudaStream_t s = ctx_->stream;
    float* x = x_.as<float>();
    auto copy_rows = [&](float* dst, const float* src, int rows) {
      DLS_CUDA(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(rows) * d * sizeof(float), cudaMemcpyDeviceToDevice, s));
    };
    for (std::size_t i = 0; i < ranges_.size(); ++i)
      if (ranges_[i].first > 0)
        copy_rows(x + static_cast<std::size_t>(item_off_[i]) * d, caches_[i]->carry(), item_desc_[i].T);
    for (const auto& g : segments_) {
      float* xs = g.all ? x : xs_.as<float>();
      float* ys = g.all ? y_.as<float>() : ys_.as<float>();
      if (!g.all)
        for (const auto& m : g.moves) copy_rows(xs + static_cast<std::size_t>(m[1]) * d, x + static_cast<std::size_t>(m[0]) * d, m[2]);
      const pass p{desc_i32(g.off_pos), desc_i32(g.off_row_item),
                   reinterpret_cast<const cuda::item_desc*>(desc_.as<unsigned char>() + g.off_items),
                   reinterpret_cast<const cuda::tile_desc*>(desc_.as<unsigned char>() + g.off_tiles),
                   g.rows, g.n_tiles, g.tile_rows, g.splits};
      run_pass(p, g.l0, g.l1, xs, ys);
      // The segment's last MLP output joins x now, before its rows go back (h is scratch here).
      if (!residual_in_gemm_)
        cuda::add_rmsnorm(xs, ys, w_->layers[0].attn_norm, h_.as<bf16>(), g.rows, c.d_model, c.rms_eps, s);
      if (!g.all)
        for (const auto& m : g.moves) copy_rows(x + static_cast<std::size_t>(m[0]) * d, xs + static_cast<std::size_t>(m[1]) * d, m[2]);
    }
    for (std::size_t i = 0; i < ranges_.size(); ++i) {
      if (ranges_[i].second >= c.n_layers) continue;
      const int T = item_desc_[i].T;
      copy_rows(caches_[i]->carry(static_cast<std::size_t>(T) * d), x + static_cast<std::size_t>(item_off_[i]) * d, T);
      caches_[i]->carry_layer = ranges_[i].second;
    }
    head_adds_y_ = false;
  }

  // Final norm of x + y on the logit rows, then the LM head (full vocabulary on every rank).
  void run_head(int M) {
    const auto& c = w_->config;
    const int d = c.d_model;
    cuda::gather_rmsnorm(x_.as<float>(), head_adds_y_ ? y_.as<float>() : nullptr,
                         desc_i32(off_src_), M, w_->ln_f,
                         z_.as<bf16>(), d, c.rms_eps, ctx_->stream);
    gemm(z_.as<bf16>(), M, d, d, w_->head, c.vocab_size, d, logits_.get(), CUDA_R_32F, c.vocab_size);
    mark(ph_head);
  }

  // The step after prepare(): layers, head and proposals, enqueued on the stream.
  void step_body(int M) {
    run_layers();
    if (M == 0) return;
    run_head(M);
    cuda::propose(logits_.as<float>(), M, w_->config.vocab_size, desc_logits(), props_.as<cuda::proposal_dev>(),
                  ctx_->stream);
    mark(ph_propose);
  }

  // A step's kernels depend on the host only through these sizes and the workspace addresses
  // (the tables' contents are uploaded anew each step), so a graph captured for one step
  // replays any later step that matches them.
  struct graph_key {
    int rows, items, tiles, tile_rows, splits, logit_rows;
    std::vector<const void*> buffers;
    bool operator<(const graph_key& o) const {
      return std::tie(rows, items, tiles, tile_rows, splits, logit_rows, buffers) <
             std::tie(o.rows, o.items, o.tiles, o.tile_rows, o.splits, o.logit_rows, o.buffers);
    }
  };

  void run_step(int M) {
    if (opt_.profile_phases) {
      marks_.clear();
      mark(ph_count);  // the step's start
      step_body(M);
      return;
    }
    // Steps with layer-split refreshes run eagerly: their segment structure is not in the key.
    if (!opt_.graphs || graphs_failed_ || opt_.shard.world > 1 || split_) {
      step_body(M);
      return;
    }
    graph_key key{rows_, static_cast<int>(item_desc_.size()), n_tiles_, tile_rows_, splits_, M, {}};
    for (const auto* b : {&x_, &y_, &h_, &qkv_, &qb_, &ob_, &gu_, &part_o_, &part_ml_, &z_, &logits_, &props_, &desc_})
      key.buffers.push_back(b->get());
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      // First sight of this shape: run it eagerly (one-off shapes never pay for a capture, and
      // one-time setup such as kernel attributes happens outside any capture).
      if (graphs_.size() >= max_graphs) drop_graphs();
      graphs_.emplace(std::move(key), nullptr);
      step_body(M);
      return;
    }
    if (!it->second && !capture(M, it->second)) {
      step_body(M);
      return;
    }
    DLS_CUDA(cudaGraphLaunch(it->second, ctx_->stream));
  }

  // Captures step_body into `exec`. On failure graphs are turned off for this backend (a
  // library call that cannot be captured), and the caller runs the step eagerly.
  bool capture(int M, cudaGraphExec_t& exec) {
    const cudaStream_t s = ctx_->stream;
    DLS_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    std::string why;
    try {
      step_body(M);
    } catch (const std::exception& e) {
      why = e.what();
    }
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (why.empty() && e != cudaSuccess) why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(e);
    if (why.empty()) {
      e = cudaGraphInstantiate(&exec, graph, 0);
      if (e != cudaSuccess) why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
    }
    if (graph) (void)cudaGraphDestroy(graph);
    if (why.empty()) return true;
    (void)cudaGetLastError();
    exec = nullptr;
    graphs_failed_ = true;
    std::fprintf(stderr, "dls cuda backend: CUDA graph capture failed, steps run without graphs: %s\n", why.c_str());
    return false;
  }

  void drop_graphs() noexcept {
    for (auto& [k, exec] : graphs_)
      if (exec) (void)cudaGraphExecDestroy(exec);
    graphs_.clear();
  }

  static constexpr std::size_t max_graphs = 64;

 public:
  // -- phase profiling (profile_phases) --
  enum phase : int { ph_embed, ph_norm, ph_qkv, ph_rope, ph_attention, ph_o, ph_allreduce, ph_gate_up, ph_swiglu,
                     ph_down, ph_head, ph_propose, ph_count };

  // The phases of the last forward, after its final synchronisation.
  std::vector<std::pair<std::string, double>> phases() const {
    static const char* names[ph_count] = {"embed",    "rmsnorm", "qkv gemm", "rope+kv",   "attention", "o gemm",
                                          "all-reduce", "gate/up gemm", "swiglu", "down gemm", "head", "propose"};
    std::vector<std::pair<std::string, double>> out;
    if (marks_.size() < 2) return out;
    std::vector<double> sum(ph_count, 0.0);
    for (std::size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, events_[i - 1], events_[i]) == cudaSuccess)
        sum[static_cast<std::size_t>(marks_[i])] += ms * 1e-3;
    }
    for (int p = 0; p < ph_count; ++p)
      if (sum[static_cast<std::size_t>(p)] > 0) out.emplace_back(names[p], sum[static_cast<std::size_t>(p)]);
    return out;
  }

 private:
  void mark(int p) {
    if (!opt_.profile_phases) return;
    if (events_.size() <= marks_.size()) {
      cudaEvent_t e;
      DLS_CUDA(cudaEventCreate(&e));
      events_.push_back(e);
    }
    DLS_CUDA(cudaEventRecord(events_[marks_.size()], ctx_->stream));
    marks_.push_back(p);
  }

  std::vector<cudaEvent_t> events_;
  std::vector<int> marks_;

  std::shared_ptr<device_context> ctx_;  // first: outlives every buffer below
  std::shared_ptr<const cuda_weights> w_;
  cuda_backend_options opt_;
  cuda::attention_impl impl_ = cuda::attention_impl::scalar;
  int hd_ = 0;
  shard_slice sl_;  // this rank's heads and MLP columns
  int rows_ = 0, n_tiles_ = 0, tile_rows_ = cuda::attention_rows, splits_ = 1;
  bool fused_qkv_ = false, fused_gate_up_ = false, residual_in_gemm_ = false;
  std::map<graph_key, cudaGraphExec_t> graphs_;
  bool graphs_failed_ = false;

  // Layer-split refresh: each item's layers and first row, its cache, and the step's segments.
  struct segment {
    int l0 = 0, l1 = 0, rows = 0, n_items = 0, n_tiles = 0, tile_rows = cuda::attention_rows, splits = 1;
    bool all = false;  // every item runs it: the rows stay where they are
    std::size_t first_row = 0, first_item = 0, first_tile = 0;  // into the seg_* host tables
    std::size_t off_pos = 0, off_row_item = 0, off_items = 0, off_tiles = 0;  // in the upload
    std::vector<std::array<int, 3>> moves;  // per item: full-layout row, compact row, rows
  };
  bool split_ = false, head_adds_y_ = false;
  std::vector<std::pair<int, int>> ranges_;
  std::vector<int> item_off_;
  std::vector<cuda_kv_cache*> caches_;
  std::vector<segment> segments_;
  std::vector<int32_t> seg_pos_, seg_row_item_;
  std::vector<cuda::item_desc> seg_items_;
  std::vector<cuda::tile_desc> seg_tiles_;

  std::vector<int32_t> tok_, pos_, row_item_, logit_src_;
  std::vector<cuda::item_desc> item_desc_;
  std::vector<cuda::tile_desc> tiles_;
  std::vector<cuda::logit_desc> logit_host_;
  std::vector<std::size_t> logit_owner_;
  std::size_t off_tok_ = 0, off_pos_ = 0, off_row_item_ = 0, off_items_ = 0, off_tiles_ = 0, off_src_ = 0,
              off_logit_ = 0;
  pinned_buffer host_desc_, host_props_;
  device_buffer x_, y_, h_, qkv_, qb_, ob_, gu_, part_o_, part_ml_, z_, logits_, props_, desc_, inv_freq_, xs_, ys_;
};

}  // namespace

std::unique_ptr<backend> make_cuda_backend(std::shared_ptr<const cuda_weights> w, const cuda_backend_options& o) {
  if (!w) throw std::invalid_argument("make_cuda_backend: no weights");
  return std::make_unique<cuda_backend>(std::move(w), o);
}

std::vector<std::pair<std::string, double>> cuda_step_phases(const backend& b) {
  const auto* cb = dynamic_cast<const cuda_backend*>(&b);
  return cb ? cb->phases() : std::vector<std::pair<std::string, double>>{};
}

std::unique_ptr<backend> make_cuda_backend(const model& m, int device, const cuda_backend_options& o) {
  return make_cuda_backend(upload_weights(m, device), o);
}

}  // namespace dls::gpu
