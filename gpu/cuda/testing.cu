// Host entry points to single kernels (parity tests) and the peak measurements (benchmark).
#include "gpu/cuda/cuda_testing.hpp"
#include "gpu/cuda/kernels.cuh"
#include "gpu/dtype.hpp"

#include <algorithm>
#include <cmath>

namespace dls::gpu::cuda_testing {

namespace {

using cuda::bf16;
using cuda::device_buffer;
using cuda::device_context;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

template <class T>
device_buffer upload(device_context& ctx, const std::vector<T>& v) {
  device_buffer b(ctx.pool, std::max<std::size_t>(1, v.size() * sizeof(T)));
  if (!v.empty())
    DLS_CUDA(cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, ctx.stream));
  DLS_CUDA(cudaStreamSynchronize(ctx.stream));
  return b;
}

device_buffer upload_bf16(device_context& ctx, const std::vector<float>& v) { return upload(ctx, to_bf16(v)); }

std::vector<float> download_f32(device_context& ctx, const device_buffer& b, std::size_t n) {
  std::vector<float> out(n);
  if (n) DLS_CUDA(cudaMemcpyAsync(out.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
  DLS_CUDA(cudaStreamSynchronize(ctx.stream));
  return out;
}

std::vector<float> download_bf16(device_context& ctx, const device_buffer& b, std::size_t n) {
  std::vector<uint16_t> raw(n);
  if (n) DLS_CUDA(cudaMemcpyAsync(raw.data(), b.get(), n * sizeof(uint16_t), cudaMemcpyDeviceToHost, ctx.stream));
  DLS_CUDA(cudaStreamSynchronize(ctx.stream));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(raw[i]);
  return out;
}

/// Times `fn` (enqueued on `s`) with events; returns the best of `reps` runs in seconds.
template <class F>
double best_time(cudaStream_t s, int reps, F&& fn) {
  cudaEvent_t a, b;
  DLS_CUDA(cudaEventCreate(&a));
  DLS_CUDA(cudaEventCreate(&b));
  double best = 1e30;
  try {
    for (int i = 0; i < 2; ++i) fn();  // warm-up
    for (int i = 0; i < reps; ++i) {
      DLS_CUDA(cudaEventRecord(a, s));
      fn();
      DLS_CUDA(cudaEventRecord(b, s));
      DLS_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      DLS_CUDA(cudaEventElapsedTime(&ms, a, b));
      best = std::min(best, static_cast<double>(ms) * 1e-3);
    }
  } catch (...) {
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
    throw;
  }
  DLS_CUDA(cudaEventDestroy(a));
  DLS_CUDA(cudaEventDestroy(b));
  return best;
}

}  // namespace

std::vector<float> rmsnorm(int device, const std::vector<float>& x, const std::vector<float>& add,
                           const std::vector<float>& w, int rows, int d, float eps, std::vector<float>* sum) {
  const std::size_t n = static_cast<std::size_t>(rows) * d;
  if (x.size() != n || w.size() != static_cast<std::size_t>(d) || (!add.empty() && add.size() != n))
    throw std::invalid_argument("rmsnorm: sizes");
  device_context ctx(device);
  cuda::device_guard guard(device);
  auto dx = upload(ctx, x), dw = upload(ctx, w);
  device_buffer dy;
  if (!add.empty()) dy = upload(ctx, add);
  device_buffer dh(ctx.pool, n * sizeof(bf16));
  cuda::add_rmsnorm(dx.as<float>(), add.empty() ? nullptr : dy.as<float>(), dw.as<float>(), dh.as<bf16>(), rows, d,
                    eps, ctx.stream);
  if (sum) *sum = download_f32(ctx, dx, n);
  return download_bf16(ctx, dh, n);
}

std::vector<float> gemm_xwt(int device, const std::vector<float>& x, int rows, int in, const std::vector<float>& w,
                            int out) {
  if (x.size() != static_cast<std::size_t>(rows) * in || w.size() != static_cast<std::size_t>(out) * in)
    throw std::invalid_argument("gemm_xwt: sizes");
  device_context ctx(device);
  cuda::device_guard guard(device);
  auto dx = upload_bf16(ctx, x), dw = upload_bf16(ctx, w);
  const std::size_t n = static_cast<std::size_t>(rows) * out;
  device_buffer dy(ctx.pool, std::max<std::size_t>(1, n) * sizeof(float));
  cuda::gemm_xwt(ctx.blas, dx.as<bf16>(), rows, in, in, dw.as<bf16>(), out, in, dy.get(), CUDA_R_32F, out);
  return download_f32(ctx, dy, n);
}

rope_result rope(int device, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                 const std::vector<int32_t>& positions, int heads, int kv_heads, int hd, float theta) {
  const int rows = static_cast<int>(positions.size());
  const std::size_t qs = static_cast<std::size_t>(heads) * hd, kvs = static_cast<std::size_t>(kv_heads) * hd;
  if (q.size() != rows * qs || k.size() != rows * kvs || v.size() != rows * kvs)
    throw std::invalid_argument("rope: sizes");
  device_context ctx(device);
  cuda::device_guard guard(device);
  std::vector<float> inv(static_cast<std::size_t>(hd / 2));
  for (int i = 0; i < hd / 2; ++i)
    inv[static_cast<std::size_t>(i)] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(theta), (2.0 * i) / static_cast<double>(hd)));
  // The backend's layout: q, k and v side by side in one buffer.
  const std::size_t ld = qs + 2 * kvs;
  std::vector<float> qkv(rows * ld);
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
    std::copy_n(q.begin() + r * qs, qs, qkv.begin() + r * ld);
    std::copy_n(k.begin() + r * kvs, kvs, qkv.begin() + r * ld + qs);
    std::copy_n(v.begin() + r * kvs, kvs, qkv.begin() + r * ld + qs + kvs);
  }
  auto dqkv = upload(ctx, qkv), dpos = upload(ctx, positions), dinv = upload(ctx, inv);
  auto drow_item = upload(ctx, std::vector<int32_t>(static_cast<std::size_t>(rows), 0));
  device_buffer qb(ctx.pool, std::max<std::size_t>(1, rows * qs) * sizeof(bf16));
  device_buffer kc(ctx.pool, std::max<std::size_t>(1, rows * kvs) * sizeof(bf16));
  device_buffer vc(ctx.pool, std::max<std::size_t>(1, rows * kvs) * sizeof(bf16));
  cuda::item_desc it;
  it.q_off = 0;
  it.T = rows;
  it.q0 = 0;
  it.L = rows;
  it.k = kc.as<bf16>();
  it.v = vc.as<bf16>();
  auto ditems = upload(ctx, std::vector<cuda::item_desc>{it});
  const float* base = dqkv.as<float>();
  cuda::rope_scatter(base, base + qs, base + qs + kvs, static_cast<int>(ld), dpos.as<int32_t>(), drow_item.as<int32_t>(),
                     ditems.as<cuda::item_desc>(), 0, rows, heads, kv_heads, hd, dinv.as<float>(), qb.as<bf16>(),
                     ctx.stream);
  rope_result r;
  r.q = download_bf16(ctx, qb, rows * qs);
  r.k = download_bf16(ctx, kc, rows * kvs);
  r.v = download_bf16(ctx, vc, rows * kvs);
  return r;
}

std::vector<float> attention(int device, const std::vector<float>& q, const std::vector<int>& tq,
                             const std::vector<std::vector<float>>& k, const std::vector<std::vector<float>>& v,
                             const std::vector<int>& tk, int heads, int kv_heads, int hd, cuda_attention impl,
                             int splits) {
  const std::size_t n = tq.size();
  if (k.size() != n || v.size() != n || tk.size() != n) throw std::invalid_argument("attention: item counts");
  const std::size_t qs = static_cast<std::size_t>(heads) * hd, kvs = static_cast<std::size_t>(kv_heads) * hd;
  device_context ctx(device);
  cuda::device_guard guard(device);
  std::vector<device_buffer> kc, vc;
  std::vector<cuda::item_desc> items;
  std::vector<cuda::tile_desc> tiles;
  int R = 0, max_l = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (tq[i] < 1 || tk[i] < 1 || k[i].size() != tk[i] * kvs || v[i].size() != tk[i] * kvs)
      throw std::invalid_argument("attention: item sizes");
    kc.push_back(upload_bf16(ctx, k[i]));
    vc.push_back(upload_bf16(ctx, v[i]));
    cuda::item_desc it;
    it.q_off = R;
    it.T = tq[i];
    it.q0 = 0;
    it.L = tk[i];
    it.k = kc.back().as<bf16>();
    it.v = vc.back().as<bf16>();
    items.push_back(it);
    R += tq[i];
    max_l = std::max(max_l, tk[i]);
  }
  if (q.size() != static_cast<std::size_t>(R) * qs) throw std::invalid_argument("attention: q size");
  const cuda::attention_impl which = cuda::resolve_attention(impl, hd);
  const int tile_rows = cuda::attention_tile_rows(which, *std::max_element(tq.begin(), tq.end()));
  for (std::size_t i = 0; i < n; ++i)
    for (int t0 = 0; t0 < tq[i]; t0 += tile_rows) tiles.push_back({static_cast<int32_t>(i), t0});
  if (splits <= 0)
    splits = cuda::choose_kv_splits(static_cast<int>(tiles.size()), tile_rows, heads, max_l, ctx.sm_count, 16);
  auto dq = upload_bf16(ctx, q);
  auto ditems = upload(ctx, items);
  auto dtiles = upload(ctx, tiles);
  const std::size_t Rz = static_cast<std::size_t>(R);
  device_buffer out(ctx.pool, Rz * qs * sizeof(bf16));
  device_buffer po, pml;
  if (splits > 1) {
    po = device_buffer(ctx.pool, static_cast<std::size_t>(splits) * Rz * qs * sizeof(float));
    pml = device_buffer(ctx.pool, static_cast<std::size_t>(splits) * Rz * heads * 2 * sizeof(float));
  }
  cuda::attention(dq.as<bf16>(), ditems.as<cuda::item_desc>(), dtiles.as<cuda::tile_desc>(),
                  static_cast<int>(tiles.size()), tile_rows, 0, R, heads, kv_heads, hd, splits, which, po.as<float>(),
                  pml.as<float>(), out.as<bf16>(), ctx.stream);
  return download_bf16(ctx, out, Rz * qs);
}

std::vector<float> swiglu(int device, const std::vector<float>& g, const std::vector<float>& u) {
  if (g.size() != u.size()) throw std::invalid_argument("swiglu: sizes");
  device_context ctx(device);
  cuda::device_guard guard(device);
  auto dg = upload_bf16(ctx, g), du = upload_bf16(ctx, u);
  device_buffer da(ctx.pool, std::max<std::size_t>(1, g.size()) * sizeof(bf16));
  const int n = static_cast<int>(g.size());
  cuda::swiglu(dg.as<bf16>(), n, du.as<bf16>(), n, da.as<bf16>(), n, 1, n, ctx.stream);
  return download_bf16(ctx, da, g.size());
}

std::vector<proposal> propose(int device, const std::vector<float>& logits, int n, int32_t suppressed,
                              double temperature, uint64_t seed, uint64_t counter, const std::vector<int32_t>& rows,
                              double score_temperature) {
  const std::size_t M = rows.size();
  if (logits.size() != M * static_cast<std::size_t>(n)) throw std::invalid_argument("propose: sizes");
  device_context ctx(device);
  cuda::device_guard guard(device);
  std::vector<cuda::logit_desc> desc(M);
  for (std::size_t j = 0; j < M; ++j) {
    desc[j].src = static_cast<int32_t>(j);
    desc[j].row = rows[j];
    desc[j].suppressed = suppressed;
    desc[j].temperature = temperature;
    desc[j].score_temperature = score_temperature;
    desc[j].seed = seed;
    desc[j].counter = counter;
  }
  auto dl = upload(ctx, logits), dd = upload(ctx, desc);
  device_buffer dout(ctx.pool, std::max<std::size_t>(1, M) * sizeof(cuda::proposal_dev));
  cuda::propose(dl.as<float>(), static_cast<int>(M), n, dd.as<cuda::logit_desc>(), dout.as<cuda::proposal_dev>(),
                ctx.stream);
  std::vector<cuda::proposal_dev> raw(M);
  if (M)
    DLS_CUDA(cudaMemcpyAsync(raw.data(), dout.get(), M * sizeof(cuda::proposal_dev), cudaMemcpyDeviceToHost,
                             ctx.stream));
  DLS_CUDA(cudaStreamSynchronize(ctx.stream));
  std::vector<proposal> out;
  for (const auto& p : raw) out.push_back({p.token, p.confidence});
  return out;
}

double measure_gemm_bf16_flops(int device, int n, int reps) {
  device_context ctx(device);
  cuda::device_guard guard(device);
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  device_buffer a(ctx.pool, nn * sizeof(bf16)), b(ctx.pool, nn * sizeof(bf16)), c(ctx.pool, nn * sizeof(float));
  cuda::fill_uniform_bf16(a.as<bf16>(), nn, 1, 1.0f, ctx.stream);
  cuda::fill_uniform_bf16(b.as<bf16>(), nn, 2, 1.0f, ctx.stream);
  const double t = best_time(ctx.stream, reps, [&] {
    cuda::gemm_xwt(ctx.blas, a.as<bf16>(), n, n, n, b.as<bf16>(), n, n, c.get(), CUDA_R_32F, n);
  });
  return 2.0 * static_cast<double>(n) * n * n / t;
}

double time_attention(int device, int items, int q_rows, int k_rows, int heads, int kv_heads, int hd,
                      cuda_attention impl, int max_splits, int reps) {
  device_context ctx(device);
  cuda::device_guard guard(device);
  const std::size_t qs = static_cast<std::size_t>(heads) * hd, kvs = static_cast<std::size_t>(kv_heads) * hd;
  const std::size_t kv_elems = static_cast<std::size_t>(k_rows) * kvs;
  device_buffer k(ctx.pool, static_cast<std::size_t>(items) * kv_elems * sizeof(bf16));
  device_buffer v(ctx.pool, static_cast<std::size_t>(items) * kv_elems * sizeof(bf16));
  cuda::fill_uniform_bf16(k.as<bf16>(), static_cast<std::size_t>(items) * kv_elems, 3, 1.0f, ctx.stream);
  cuda::fill_uniform_bf16(v.as<bf16>(), static_cast<std::size_t>(items) * kv_elems, 4, 1.0f, ctx.stream);
  std::vector<cuda::item_desc> desc;
  std::vector<cuda::tile_desc> tiles;
  const cuda::attention_impl which = cuda::resolve_attention(impl, hd);
  const int tile_rows = cuda::attention_tile_rows(which, q_rows);
  for (int i = 0; i < items; ++i) {
    cuda::item_desc it;
    it.q_off = i * q_rows;
    it.T = q_rows;
    it.q0 = 0;
    it.L = k_rows;
    it.k = k.as<bf16>() + static_cast<std::size_t>(i) * kv_elems;
    it.v = v.as<bf16>() + static_cast<std::size_t>(i) * kv_elems;
    desc.push_back(it);
    for (int t0 = 0; t0 < q_rows; t0 += tile_rows) tiles.push_back({i, t0});
  }
  const int R = items * q_rows;
  const int splits =
      cuda::choose_kv_splits(static_cast<int>(tiles.size()), tile_rows, heads, k_rows, ctx.sm_count, max_splits);
  device_buffer q(ctx.pool, static_cast<std::size_t>(R) * qs * sizeof(bf16));
  cuda::fill_uniform_bf16(q.as<bf16>(), static_cast<std::size_t>(R) * qs, 5, 1.0f, ctx.stream);
  device_buffer out(ctx.pool, static_cast<std::size_t>(R) * qs * sizeof(bf16));
  device_buffer po, pml;
  if (splits > 1) {
    po = device_buffer(ctx.pool, static_cast<std::size_t>(splits) * R * qs * sizeof(float));
    pml = device_buffer(ctx.pool, static_cast<std::size_t>(splits) * R * heads * 2 * sizeof(float));
  }
  auto ditems = upload(ctx, desc);
  auto dtiles = upload(ctx, tiles);
  return best_time(ctx.stream, reps, [&] {
    cuda::attention(q.as<bf16>(), ditems.as<cuda::item_desc>(), dtiles.as<cuda::tile_desc>(),
                    static_cast<int>(tiles.size()), tile_rows, 0, R, heads, kv_heads, hd, splits, which, po.as<float>(),
                    pml.as<float>(), out.as<bf16>(), ctx.stream);
  });
}

double measure_copy_bytes_per_s(int device, std::size_t bytes, int reps) {
  device_context ctx(device);
  cuda::device_guard guard(device);
  device_buffer a(ctx.pool, bytes), b(ctx.pool, bytes);
  DLS_CUDA(cudaMemsetAsync(a.get(), 1, bytes, ctx.stream));
  const double t = best_time(ctx.stream, reps, [&] {
    DLS_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream));
  });
  return 2.0 * static_cast<double>(bytes) / t;
}

}  // namespace dls::gpu::cuda_testing
