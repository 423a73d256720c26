#include "gpu/cpu_backend.hpp"

#include "gpu/cpu_huge_pages.hpp"
#include "gpu/cpu_kernels.hpp"
#include "gpu/cpu_packed_gemm.hpp"
#include "gpu/kv_wire.hpp"
#include "gpu/layer_segments.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace dls::gpu {

namespace {

class cpu_kv_cache final : public kv_cache {
 public:
  int layers = 0, rows = 0, width = 0;
  std::vector<float, cpu::huge_page_allocator<float>> k, v;  // [layer][row][width]

  void ensure(int l, int r, int w) {
    if (l == layers && r == rows && w == width) return;
    layers = l;
    rows = r;
    width = w;
    std::size_t n = static_cast<std::size_t>(l) * static_cast<std::size_t>(r) * static_cast<std::size_t>(w);
    k.assign(n, 0.0f);
    v.assign(n, 0.0f);
  }
  // Hidden states of a split refresh's rows between its layer ranges, and the next layer.
  std::vector<float> carry;
  int carry_layer = 0;

  float* k_layer(int l) { return k.data() + static_cast<std::size_t>(l) * rows * width; }
  float* v_layer(int l) { return v.data() + static_cast<std::size_t>(l) * rows * width; }

  std::size_t bytes() const override { return (k.size() + v.size() + carry.size()) * sizeof(float); }

  std::string export_bytes() const override {
    auto out = kv_wire_buffer({layers, rows, width, kv_dtype::f32});
    if (k.empty()) return out;
    std::memcpy(&out[kv_header_bytes], k.data(), k.size() * sizeof(float));
    std::memcpy(&out[kv_header_bytes + k.size() * sizeof(float)], v.data(), v.size() * sizeof(float));
    return out;
  }

  void import_bytes(std::string_view bytes) override {
    const kv_dims d = parse_kv_wire(bytes);
    ensure(d.layers, d.rows, d.width);
    if (d.count() == 0) return;  // an empty vector's data() may be null, which memcpy must not get
    read_kv_plane(bytes, d, 0, k.data());
    read_kv_plane(bytes, d, 1, v.data());
  }
};

class cpu_backend final : public backend {
 public:
  cpu_backend(std::shared_ptr<const model> m, shard_spec s, allreduce* ar) : m_(std::move(m)), shard_(s), ar_(ar) {
    const auto& c = m_->config;
    const shard_slice sl = slice_for(c, s);
    if (s.world > 1 && (!ar || ar->world() != s.world))
      throw std::invalid_argument("TP degree > 1 needs an all-reduce of the same world size");
    cpu::pin_blas_threads();
    hd_ = c.head_dim();
    sl_ = sl;
    pack_weights();
  }

  std::string name() const override { return "cpu"; }
  shard_spec shard() const override { return shard_; }
  int layers() const override { return m_->config.n_layers; }
  int logit_shift() const override { return m_->config.logit_shift; }
  bool scores(proposal_score) const override { return true; }
  bool truncates() const override { return true; }
  std::unique_ptr<kv_cache> make_cache() override { return std::make_unique<cpu_kv_cache>(); }

  void forward(const std::vector<forward_item>& items, std::vector<std::vector<row_proposal>>& proposals) override {
    run_layers(items);
    // Logits only for the masked rows of each item's current block.
    const auto& c = m_->config;
    std::vector<int> src;           // row of x_ per logits row
    std::vector<std::size_t> owner;  // item per logits row
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& it = items[i];
      if (range_[i].second < c.n_layers) continue;  // a split refresh's inner range: no logits
      for (int r = it.plan.block0; r < it.plan.block1; ++r)
        if (it.c->ids[static_cast<std::size_t>(r)] == it.c->mask_id) {
          // With the shift, row r - 1's logits propose token r; the plan must have computed it.
          const int from = r - c.logit_shift;
          if (from < it.plan.q0 || from >= it.plan.q1)
            throw std::invalid_argument("step plan rows [" + std::to_string(it.plan.q0) + ", " +
                                        std::to_string(it.plan.q1) + ") lack row " + std::to_string(from) +
                                        ", whose logits propose token " + std::to_string(r));
          src.push_back(offsets_[i] + (from - it.plan.q0));
          owner.push_back(i);
        }
    }
    head_rows(src);
    proposals.assign(items.size(), {});
    for (std::size_t j = 0; j < src.size(); ++j) {
      const auto& it = items[owner[j]];
      int row = it.plan.q0 + (src[j] - offsets_[owner[j]]) + c.logit_shift;
      const auto& p = it.c->params;
      const float* l = logits_.data() + j * static_cast<std::size_t>(c.vocab_size);
      auto pr = p.truncates() ? cpu::propose_truncated(l, c.vocab_size, it.c->mask_id, p.temperature, p.seed,
                                                       static_cast<uint64_t>(it.c->steps), row, score_of(p.rule),
                                                       p.top_p, p.top_k, sampler_of(c.arch))
                              : cpu::propose(l, c.vocab_size, it.c->mask_id, p.temperature, p.seed,
                                             static_cast<uint64_t>(it.c->steps), row, score_of(p.rule),
                                             sampler_of(c.arch));
      proposals[owner[j]].push_back({row, pr.token, pr.confidence});
    }
  }

  std::vector<float> logits(const canvas& cv, const step_plan& plan, kv_cache& cache) override {
    std::vector<forward_item> items{{&cv, plan, &cache}};
    run_layers(items);
    if (range_[0].second < m_->config.n_layers)
      throw std::invalid_argument("logits need a step plan that runs through the last layer");
    std::vector<int> src;
    for (int r = 0; r < plan.query_rows(); ++r) src.push_back(r);
    head_rows(src);
    return logits_;
  }

 private:
  void run_layers(const std::vector<forward_item>& items) {
    const auto& c = m_->config;
    const int d = c.d_model, kvs = sl_.kv_heads * hd_;
    offsets_.assign(items.size() + 1, 0);
    range_.assign(items.size(), {0, c.n_layers});
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& p = items[i].plan;
      if (p.q0 < 0 || p.q1 > items[i].c->length() || p.q0 >= p.q1) throw std::invalid_argument("bad step plan");
      range_[i] = plan_layers(p, c.n_layers);
      offsets_[i + 1] = offsets_[i] + p.query_rows();
    }
    const int R = offsets_.back();
    const auto Rz = static_cast<std::size_t>(R);
    x_.resize(Rz * d);
    pos_.resize(Rz);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& it = items[i];
      auto* cache = static_cast<cpu_kv_cache*>(it.cache);
      cache->ensure(c.n_layers, it.c->length(), kvs);
      const auto off = static_cast<std::size_t>(offsets_[i]);
      for (int r = it.plan.q0; r < it.plan.q1; ++r) pos_[off + static_cast<std::size_t>(r - it.plan.q0)] = r;
      if (range_[i].first > 0) {
        // A split refresh resumes from the hidden states its previous range left.
        if (cache->carry_layer != range_[i].first || cache->carry.size() != static_cast<std::size_t>(it.plan.query_rows()) * d)
          throw std::invalid_argument("split refresh resumes at layer " + std::to_string(range_[i].first) +
                                      " but its cache holds layer " + std::to_string(cache->carry_layer));
        std::memcpy(&x_[off * d], cache->carry.data(), sizeof(float) * cache->carry.size());
        continue;
      }
      for (int r = it.plan.q0; r < it.plan.q1; ++r) {
        int32_t id = it.c->ids[static_cast<std::size_t>(r)];
        if (id < 0 || id >= c.vocab_size) throw std::invalid_argument("token id out of the vocabulary");
        auto row = off + static_cast<std::size_t>(r - it.plan.q0);
        if (m_->wte)
          std::memcpy(&x_[row * d], m_->wte + static_cast<std::size_t>(id) * d, sizeof(float) * d);
        else
          cpu::bf16_to_f32_row(m_->wte_bf16 + static_cast<std::size_t>(id) * d, &x_[row * d], static_cast<std::size_t>(d));
      }
    }
    all_.resize(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) all_[i] = i;
    for (const auto& g : plan_layer_segments(range_, c.n_layers)) {
      if (g.all) {
        size_workspace(R);
        for (int l = g.l0; l < g.l1; ++l) layer(l, items, all_, offsets_, x_.data(), pos_.data(), R);
        continue;
      }
      // Some items sit these layers out: run them on the others' rows gathered together, then
      // put the rows back.
      sub_offsets_.assign(g.items.size() + 1, 0);
      for (std::size_t j = 0; j < g.items.size(); ++j)
        sub_offsets_[j + 1] = sub_offsets_[j] + items[g.items[j]].plan.query_rows();
      const int Ra = sub_offsets_.back();
      xs_.resize(static_cast<std::size_t>(Ra) * d);
      pos_sub_.resize(static_cast<std::size_t>(Ra));
      auto move_rows = [&](bool gather) {
        for (std::size_t j = 0; j < g.items.size(); ++j) {
          const auto n = static_cast<std::size_t>(items[g.items[j]].plan.query_rows());
          const auto full_row = static_cast<std::size_t>(offsets_[g.items[j]]);
          const auto sub_row = static_cast<std::size_t>(sub_offsets_[j]);
          if (gather) {
            std::memcpy(&xs_[sub_row * d], &x_[full_row * d], sizeof(float) * n * d);
            std::memcpy(&pos_sub_[sub_row], &pos_[full_row], sizeof(int32_t) * n);
          } else {
            std::memcpy(&x_[full_row * d], &xs_[sub_row * d], sizeof(float) * n * d);
          }
        }
      };
      move_rows(true);
      size_workspace(Ra);
      for (int l = g.l0; l < g.l1; ++l) layer(l, items, g.items, sub_offsets_, xs_.data(), pos_sub_.data(), Ra);
      move_rows(false);
    }
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto* cache = static_cast<cpu_kv_cache*>(items[i].cache);
      if (range_[i].second < c.n_layers) {
        const auto n = static_cast<std::size_t>(items[i].plan.query_rows()) * d;
        cache->carry.assign(x_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(offsets_[i]) * d),
                            x_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(offsets_[i]) * d + n));
        cache->carry_layer = range_[i].second;
      } else if (!cache->carry.empty()) {
        std::vector<float>().swap(cache->carry);  // the refresh is done: free its hidden states
        cache->carry_layer = 0;
      }
    }
  }

  // Workspace for a pass over R rows (the layer buffers; x is the caller's).
  void size_workspace(int R) {
    const auto Rz = static_cast<std::size_t>(R);
    const int d = m_->config.d_model, qs = sl_.heads * hd_, kvs = sl_.kv_heads * hd_, fs = sl_.f1 - sl_.f0;
    h_.resize(Rz * d);
    y_.resize(Rz * d);
    q_.resize(Rz * qs);
    k_.resize(Rz * kvs);
    v_.resize(Rz * kvs);
    o_.resize(Rz * qs);
    g_.resize(Rz * fs);
    u_.resize(Rz * fs);
  }

  // One transformer layer over the R rows at x (workspace sized for R) of the items listed in `act` (their row offsets
  // into x in `offs`, one more than act.size()).
  void layer(int l, const std::vector<forward_item>& items, const std::vector<std::size_t>& act,
             const std::vector<int>& offs, float* x, const int32_t* pos, int R) {
    const auto& c = m_->config;
    const int d = c.d_model, qs = sl_.heads * hd_, kvs = sl_.kv_heads * hd_, fs = sl_.f1 - sl_.f0;
    const auto Rz = static_cast<std::size_t>(R);
    const auto& w = m_->layers[static_cast<std::size_t>(l)];
    cpu::rmsnorm(x, w.attn_norm, h_.data(), R, d, c.rms_eps);
    const auto* pk = packed_.empty() ? nullptr : &packed_[static_cast<std::size_t>(l)];
    const auto q_off = static_cast<std::size_t>(sl_.h0) * hd_, kv_off = static_cast<std::size_t>(sl_.kvh0) * hd_;
    product(h_.data(), R, d, mat(w.q_proj, w.bf16.q_proj, q_off * d), qs, d, d, pk ? &pk->q : nullptr, q_.data(), qs);
    product(h_.data(), R, d, mat(w.k_proj, w.bf16.k_proj, kv_off * d), kvs, d, d, pk ? &pk->k : nullptr, k_.data(),
            kvs);
    product(h_.data(), R, d, mat(w.v_proj, w.bf16.v_proj, kv_off * d), kvs, d, d, pk ? &pk->v : nullptr, v_.data(),
            kvs);
    if (w.q_bias) {
      cpu::add_bias(q_.data(), R, qs, qs, w.q_bias + q_off);
      cpu::add_bias(k_.data(), R, kvs, kvs, w.k_bias + kv_off);
      cpu::add_bias(v_.data(), R, kvs, kvs, w.v_bias + kv_off);
    }
    cpu::rope(q_.data(), pos, R, sl_.heads, hd_, qs, c.rope_theta);
    cpu::rope(k_.data(), pos, R, sl_.kv_heads, hd_, kvs, c.rope_theta);
    for (std::size_t j = 0; j < act.size(); ++j) {
      const auto& it = items[act[j]];
      auto* cache = static_cast<cpu_kv_cache*>(it.cache);
      const int T = it.plan.query_rows();
      const auto off = static_cast<std::size_t>(offs[j]);
      float* kl = cache->k_layer(l);
      float* vl = cache->v_layer(l);
      std::memcpy(kl + static_cast<std::size_t>(it.plan.q0) * kvs, &k_[off * kvs], sizeof(float) * T * kvs);
      std::memcpy(vl + static_cast<std::size_t>(it.plan.q0) * kvs, &v_[off * kvs], sizeof(float) * T * kvs);
      cpu::attention(&q_[off * qs], T, qs, kl, vl, it.c->length(), kvs, sl_.heads, sl_.kv_heads, hd_, &o_[off * qs], qs,
                     scores_);
    }
    product(o_.data(), R, qs, mat(w.attn_out, w.bf16.attn_out, q_off), d, qs, d, pk ? &pk->attn_out : nullptr, y_.data(),
            d);
    reduce_add(x, R * d);
    cpu::rmsnorm(x, w.ff_norm, h_.data(), R, d, c.rms_eps);
    const auto f_off = static_cast<std::size_t>(sl_.f0);
    product(h_.data(), R, d, mat(w.ff_proj, w.bf16.ff_proj, f_off * d), fs, d, d, pk ? &pk->ff_proj : nullptr, g_.data(),
            fs);
    product(h_.data(), R, d, mat(w.up_proj, w.bf16.up_proj, f_off * d), fs, d, d, pk ? &pk->up_proj : nullptr, u_.data(),
            fs);
    cpu::swiglu(g_.data(), u_.data(), Rz * fs);
    product(g_.data(), R, fs, mat(w.ff_out, w.bf16.ff_out, f_off), d, fs, c.mlp_hidden, pk ? &pk->ff_out : nullptr,
            y_.data(), d);
    reduce_add(x, R * d);
  }

  // A weight matrix as the checkpoint holds it (f32 or bf16), from element `off` on.
  struct wmat {
    const float* f32 = nullptr;
    const uint16_t* bf16 = nullptr;
  };
  static wmat mat(const float* f, const uint16_t* b, std::size_t off) {
    return f ? wmat{f + off, nullptr} : wmat{nullptr, b + off};
  }

  // Y = X W^T for W [out, in] (ld ldw): the packed small-M kernel when this step has few rows and
  // the weights were packed, OpenBLAS otherwise (a refresh's L rows run at its large-M rate).
  static void product(const float* x, int rows, int ldx, wmat w, int out, int in, int ldw,
                      const cpu::packed_weights* pw, float* y, int ldy) {
    if (pw && rows >= 1 && rows <= cpu::packed_weights::max_rows)
      cpu::matmul_packed(x, rows, ldx, *pw, y, ldy);
    else if (w.f32)
      cpu::matmul_xwt(x, rows, in, ldx, w.f32, out, ldw, y, ldy);
    else
      cpu::matmul_xwt_bf16(x, rows, in, ldx, w.bf16, out, ldw, y, ldy);
  }

  // The packed kernel reads f32 panels; a bf16 matrix is widened once into a temporary to pack it.
  static cpu::packed_weights pack(wmat w, int out, int in, int ld) {
    if (w.f32) return cpu::packed_weights(w.f32, out, in, ld);
    std::vector<float> tmp(static_cast<std::size_t>(out) * ld);
    for (int r = 0; r < out; ++r)
      cpu::bf16_to_f32_row(w.bf16 + static_cast<std::size_t>(r) * ld, tmp.data() + static_cast<std::size_t>(r) * ld,
                           static_cast<std::size_t>(in));
    return cpu::packed_weights(tmp.data(), out, in, ld);
  }

  // The packed copy doubles the weights' memory, so it is made only for shards that fit the budget;
  // bigger shards run every product through OpenBLAS.
  static constexpr std::size_t pack_budget_bytes = std::size_t{2} << 30;

  void pack_weights() {
    if (!cpu::packed_gemm_available()) return;
    const auto& c = m_->config;
    const int d = c.d_model, qs = sl_.heads * hd_, kvs = sl_.kv_heads * hd_, fs = sl_.f1 - sl_.f0;
    const std::size_t per_layer = static_cast<std::size_t>(d) * (qs + 2 * kvs + qs + 3 * fs);
    const std::size_t total = sizeof(float) * (per_layer * c.n_layers + static_cast<std::size_t>(c.vocab_size) * d);
    if (total > pack_budget_bytes) return;
    const auto q_off = static_cast<std::size_t>(sl_.h0) * hd_, kv_off = static_cast<std::size_t>(sl_.kvh0) * hd_;
    const auto f_off = static_cast<std::size_t>(sl_.f0);
    for (const auto& w : m_->layers) {
      packed_.push_back({pack(mat(w.q_proj, w.bf16.q_proj, q_off * d), qs, d, d),
                         pack(mat(w.k_proj, w.bf16.k_proj, kv_off * d), kvs, d, d),
                         pack(mat(w.v_proj, w.bf16.v_proj, kv_off * d), kvs, d, d),
                         pack(mat(w.attn_out, w.bf16.attn_out, q_off), d, qs, d),
                         pack(mat(w.ff_proj, w.bf16.ff_proj, f_off * d), fs, d, d),
                         pack(mat(w.up_proj, w.bf16.up_proj, f_off * d), fs, d, d),
                         pack(mat(w.ff_out, w.bf16.ff_out, f_off), d, fs, c.mlp_hidden)});
    }
    packed_head_ = pack(mat(m_->head, m_->head_bf16, 0), c.vocab_size, d, d);
  }

  void reduce_add(float* x, int n) {
    if (ar_ && shard_.world > 1) ar_->sum(y_.data(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) x[i] += y_[static_cast<std::size_t>(i)];
  }

  // Final norm + LM head on the selected rows of x_, into logits_.
  void head_rows(const std::vector<int>& src) {
    const auto& c = m_->config;
    const int d = c.d_model, M = static_cast<int>(src.size());
    z_.resize(static_cast<std::size_t>(M) * d);
    for (int j = 0; j < M; ++j)
      std::memcpy(&z_[static_cast<std::size_t>(j) * d], &x_[static_cast<std::size_t>(src[static_cast<std::size_t>(j)]) * d],
                  sizeof(float) * d);
    cpu::rmsnorm(z_.data(), m_->ln_f, z_.data(), M, d, c.rms_eps);
    logits_.resize(static_cast<std::size_t>(M) * c.vocab_size);
    product(z_.data(), M, d, mat(m_->head, m_->head_bf16, 0), c.vocab_size, d, d,
            packed_head_.empty() ? nullptr : &packed_head_, logits_.data(), c.vocab_size);
  }

  std::shared_ptr<const model> m_;
  shard_spec shard_;
  allreduce* ar_;
  int hd_ = 0;
  shard_slice sl_;  // this rank's heads and MLP columns
  struct packed_layer {
    cpu::packed_weights q, k, v, attn_out, ff_proj, up_proj, ff_out;
  };
  std::vector<packed_layer> packed_;  // empty: every product through OpenBLAS
  cpu::packed_weights packed_head_;
  std::vector<int> offsets_, sub_offsets_;
  std::vector<std::pair<int, int>> range_;  // layers [first, second) each item runs this step
  std::vector<std::size_t> all_;            // every item: the segments every item runs
  std::vector<int32_t> pos_, pos_sub_;
  std::vector<float> x_, xs_, h_, y_, q_, k_, v_, o_, g_, u_, z_, logits_, scores_;
};

}  // namespace

std::unique_ptr<backend> make_cpu_backend(std::shared_ptr<const model> m, shard_spec shard, allreduce* ar) {
  return std::make_unique<cpu_backend>(std::move(m), shard, ar);
}

}  // namespace dls::gpu
