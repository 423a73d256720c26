// Whole-model parity of the CUDA backend against the CPU backend on the shipped tiny model
// (a random tiny-shaped model until it exists): logits of refresh and reuse steps within
// tolerance, token-identical temperature-0 threshold decodes for every cache mode (single and
// batched, and with layer-split refreshes), Gumbel sampling, KV cache export/import, and error
// reporting.
#define BOOST_TEST_MODULE cuda_model
#include "cuda_test_support.hpp"
#include "model_fixture.hpp"

#include "gpu/kv_wire.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"

#include <algorithm>
#include <string>

using namespace dls::gpu;
using namespace dls_test;

DLS_CUDA_TEST_MAIN(1)

namespace {

// bf16 activations (norm outputs, attention inputs and outputs, MLP hidden) against f32.
constexpr double logits_tolerance = 3e-2;

const test_model& fixture() {
  static test_model t = load_test_model();
  return t;
}

std::shared_ptr<const cuda_weights> device_weights() {
  static auto w = upload_weights(*fixture().m, 0);
  return w;
}

std::unique_ptr<backend> cpu() { return make_cpu_backend(fixture().m); }
std::unique_ptr<backend> gpu(cuda_attention a = cuda_attention::automatic, bool graphs = true) {
  cuda_backend_options o;
  o.attention = a;
  o.graphs = graphs;
  return make_cuda_backend(device_weights(), o);
}

decode_params params(cache_mode mode, double temperature = 0.0) {
  decode_params p;
  p.gen_length = fixture().gen_length;
  p.block_length = fixture().block_length;
  p.rule = commit_rule::threshold;
  p.threshold = 0.9;
  p.cache = mode;
  p.temperature = temperature;
  p.seed = 99;
  return p;
}

canvas start(const std::vector<int32_t>& prompt, const decode_params& p) {
  const auto& c = fixture().m->config;
  return canvas::start(prompt, p, c.mask_id, c.eos_id);
}

/// Decodes every prompt to completion; max_batch > 1 steps them together.
std::vector<canvas> decode(std::unique_ptr<backend> b, const decode_params& p, int max_batch) {
  engine e(std::move(b));
  std::vector<request_slot> slots;
  for (const auto& prompt : fixture().prompts) slots.push_back(e.admit(start(prompt, p)));
  decode_all(e, slots, max_batch);
  std::vector<canvas> out;
  for (auto& s : slots) out.push_back(s.c);
  return out;
}

void expect_same_decodes(const std::vector<canvas>& got, const std::vector<canvas>& ref, const std::string& what) {
  BOOST_REQUIRE_EQUAL(got.size(), ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    BOOST_TEST_CONTEXT(what << ", prompt " << i) {
      BOOST_TEST(got[i].finished);
      BOOST_TEST(got[i].ids == ref[i].ids, boost::test_tools::per_element());
      BOOST_TEST(got[i].steps == ref[i].steps);
      BOOST_TEST(got[i].refresh_steps == ref[i].refresh_steps);
      BOOST_TEST(got[i].reuse_steps == ref[i].reuse_steps);
    }
  }
}

step_plan reuse_plan(const canvas& c, cache_mode mode) {
  step_plan p;
  p.kind = step_kind::reuse;
  p.block0 = c.block_begin();
  p.block1 = c.block_end();
  p.key_rows = c.length();
  p.q0 = p.block0;
  p.q1 = mode == cache_mode::dual ? p.block1 : c.length();
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(logits_match_cpu_on_refresh_and_reuse_steps) {
  for (auto attn : {cuda_attention::automatic, cuda_attention::tensor_core, cuda_attention::scalar}) {
    auto cb = cpu();
    auto gb = gpu(attn);
    for (std::size_t i = 0; i < std::min<std::size_t>(2, fixture().prompts.size()); ++i) {
      canvas c = start(fixture().prompts[i], params(cache_mode::dual));
      auto cc = cb->make_cache();
      auto gc = gb->make_cache();
      const step_plan refresh = c.next_step();
      BOOST_REQUIRE(refresh.kind == step_kind::refresh);
      auto lc = cb->logits(c, refresh, *cc);
      auto lg = gb->logits(c, refresh, *gc);
      BOOST_TEST_MESSAGE("refresh logits rel err " << rel_l2(lg, lc));
      BOOST_TEST(rel_l2(lg, lc) < logits_tolerance);
      BOOST_TEST(lg.size() == static_cast<std::size_t>(c.length()) * fixture().m->config.vocab_size);
      // Reuse steps read the K/V the refresh left in each backend's cache.
      for (auto mode : {cache_mode::dual, cache_mode::prefix}) {
        const step_plan p = reuse_plan(c, mode);
        auto rc = cb->logits(c, p, *cc);
        auto rg = gb->logits(c, p, *gc);
        BOOST_TEST_CONTEXT("attention " << static_cast<int>(attn) << " prompt " << i << " mode " << to_string(mode)) {
          BOOST_TEST(rg.size() == rc.size());
          BOOST_TEST(rel_l2(rg, rc) < logits_tolerance);
        }
      }
    }
  }
}

// Both backends step the same canvases (the CPU's proposals drive the commits), so this
// measures per-step agreement even where a near-tie at tau would make whole decodes diverge;
// when the token-identity test below fails, this one says by how much the backends differ.
BOOST_AUTO_TEST_CASE(lockstep_proposals_agree) {
  for (auto mode : {cache_mode::none, cache_mode::prefix, cache_mode::dual}) {
    auto cb = cpu();
    auto gb = gpu();
    std::size_t rows = 0, token_mismatch = 0;
    double max_dconf = 0;
    for (const auto& prompt : fixture().prompts) {
      canvas c = start(prompt, params(mode));
      auto cc = cb->make_cache();
      auto gc = gb->make_cache();
      while (!c.finished) {
        const step_plan plan = c.next_step();
        std::vector<std::vector<row_proposal>> pc, pg;
        cb->forward({{&c, plan, cc.get()}}, pc);
        gb->forward({{&c, plan, gc.get()}}, pg);
        BOOST_REQUIRE_EQUAL(pg.size(), 1u);
        BOOST_REQUIRE_EQUAL(pg[0].size(), pc[0].size());
        for (std::size_t j = 0; j < pc[0].size(); ++j) {
          BOOST_REQUIRE_EQUAL(pg[0][j].position, pc[0][j].position);
          ++rows;
          token_mismatch += pg[0][j].token != pc[0][j].token;
          max_dconf = std::max(max_dconf, std::fabs(pg[0][j].confidence - pc[0][j].confidence));
        }
        c.apply(pc[0]);
      }
    }
    BOOST_TEST_MESSAGE("cache " << to_string(mode) << ": " << rows << " proposals, " << token_mismatch
                                << " token mismatches, max |confidence difference| " << max_dconf);
    BOOST_TEST_CONTEXT("cache " << to_string(mode)) {
      BOOST_TEST(rows > 0u);
      BOOST_TEST(max_dconf < 0.05);
      BOOST_TEST(token_mismatch * 100 <= rows);
    }
  }
}

BOOST_AUTO_TEST_CASE(threshold_decodes_are_token_identical_for_each_cache_mode) {
  bool saw_reuse = false;
  for (auto mode : {cache_mode::none, cache_mode::prefix, cache_mode::dual}) {
    const auto p = params(mode);
    auto ref = decode(cpu(), p, 1);
    for (const auto& c : ref) saw_reuse |= c.reuse_steps > 0;
    expect_same_decodes(decode(gpu(), p, 1), ref, std::string("single, cache ") + to_string(mode));
    // Batched: requests of different lengths, mixing refresh and reuse steps in one batch.
    expect_same_decodes(decode(gpu(), p, 3), ref, std::string("batch 3, cache ") + to_string(mode));
  }
  BOOST_TEST(saw_reuse);  // the cache modes really took reuse steps
}

/// Decodes every prompt batched, giving request k at step n a layer limit of (n + 2k) mod 4
/// (0: the rest of its layers), so steps mix whole refreshes, layer ranges from layer 0 and
/// from the middle, and reuse steps. Returns the decodes and how many ranges stopped short.
std::pair<std::vector<canvas>, int> decode_split(std::unique_ptr<backend> b, const decode_params& p) {
  engine e(std::move(b));
  std::vector<request_slot> slots;
  for (const auto& prompt : fixture().prompts) slots.push_back(e.admit(start(prompt, p)));
  int partial = 0;
  for (int step = 0;; ++step) {
    std::vector<request_slot*> batch;
    std::vector<int> limits;
    for (std::size_t k = 0; k < slots.size(); ++k)
      if (!slots[k].c.finished) {
        batch.push_back(&slots[k]);
        limits.push_back(static_cast<int>((static_cast<std::size_t>(step) + 2 * k) % 4));
      }
    if (batch.empty()) break;
    for (const auto& r : e.step(batch, limits)) partial += r.partial;
  }
  std::vector<canvas> out;
  for (auto& s : slots) out.push_back(s.c);
  return {out, partial};
}

BOOST_AUTO_TEST_CASE(layer_split_refreshes_decode_the_same_tokens_as_whole_ones) {
  for (auto mode : {cache_mode::none, cache_mode::prefix, cache_mode::dual}) {
    const auto p = params(mode);
    auto ref = decode(gpu(), p, 4);
    auto [got, partial] = decode_split(gpu(), p);
    BOOST_TEST(partial > 0);
    expect_same_decodes(got, ref, std::string("split on the GPU, cache ") + to_string(mode));
    // And the CPU backend, splitting the same way, agrees with both.
    expect_same_decodes(decode_split(cpu(), p).first, ref, std::string("split on the CPU, cache ") + to_string(mode));
  }
  // Without graphs too (split steps always run eagerly; the whole steps between them replay).
  auto [eager, partial] = decode_split(gpu(cuda_attention::automatic, false), params(cache_mode::dual));
  BOOST_TEST(partial > 0);
  expect_same_decodes(eager, decode(gpu(), params(cache_mode::dual), 4), "split, no graphs");
}

// A step shape runs eagerly the first time, is captured as a CUDA graph the second time and
// replayed after that: all three must give the eager backend's proposals bit for bit.
BOOST_AUTO_TEST_CASE(graph_replay_is_bitwise_the_eager_step) {
  for (auto mode : {cache_mode::none, cache_mode::dual}) {
    auto eager = gpu(cuda_attention::automatic, false);
    auto graphed = gpu(cuda_attention::automatic, true);
    std::vector<canvas> cs;
    std::vector<std::unique_ptr<kv_cache>> ce, cg;
    for (const auto& prompt : fixture().prompts) {
      cs.push_back(start(prompt, params(mode)));
      ce.push_back(eager->make_cache());
      cg.push_back(graphed->make_cache());
    }
    std::size_t steps = 0;
    for (bool any = true; any;) {
      any = false;
      std::vector<forward_item> ie, ig;
      for (std::size_t i = 0; i < cs.size(); ++i) {
        if (cs[i].finished) continue;
        const step_plan p = cs[i].next_step();
        ie.push_back({&cs[i], p, ce[i].get()});
        ig.push_back({&cs[i], p, cg[i].get()});
      }
      if (ie.empty()) break;
      any = true;
      std::vector<std::vector<row_proposal>> pe;
      eager->forward(ie, pe);
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<std::vector<row_proposal>> pg;
        graphed->forward(ig, pg);
        BOOST_REQUIRE_EQUAL(pg.size(), pe.size());
        for (std::size_t i = 0; i < pe.size(); ++i) {
          BOOST_REQUIRE_EQUAL(pg[i].size(), pe[i].size());
          for (std::size_t j = 0; j < pe[i].size(); ++j) {
            BOOST_TEST_CONTEXT("cache " << to_string(mode) << " step " << steps << " rep " << rep) {
              BOOST_TEST(pg[i][j].position == pe[i][j].position);
              BOOST_TEST(pg[i][j].token == pe[i][j].token);
              BOOST_TEST(pg[i][j].confidence == pe[i][j].confidence);
            }
          }
        }
      }
      std::size_t k = 0;
      for (std::size_t i = 0; i < cs.size(); ++i)
        if (!cs[i].finished) cs[i].apply(pe[k++]);
      ++steps;
    }
    BOOST_TEST(steps > 2u);
  }
}

BOOST_AUTO_TEST_CASE(phase_profile_times_every_phase_and_changes_no_result) {
  cuda_backend_options o;
  o.profile_phases = true;
  auto prof = make_cuda_backend(device_weights(), o);
  auto plain = gpu();
  BOOST_TEST(cuda_step_phases(*plain).empty());
  canvas c = start(fixture().prompts[0], params(cache_mode::dual));
  auto cp = prof->make_cache();
  auto cq = plain->make_cache();
  std::vector<std::vector<row_proposal>> pp, pq;
  const step_plan p = c.next_step();
  prof->forward({{&c, p, cp.get()}}, pp);
  plain->forward({{&c, p, cq.get()}}, pq);
  const auto phases = cuda_step_phases(*prof);
  double total = 0;
  std::vector<std::string> names;
  for (const auto& [n, t] : phases) {
    names.push_back(n);
    BOOST_TEST(t > 0.0);
    total += t;
  }
  for (const char* want : {"embed", "rmsnorm", "qkv gemm", "rope+kv", "attention", "o gemm", "gate/up gemm", "swiglu",
                           "down gemm", "head", "propose"})
    BOOST_TEST((std::find(names.begin(), names.end(), want) != names.end()), want);
  BOOST_TEST(total < 10.0);
  BOOST_REQUIRE_EQUAL(pp.size(), pq.size());
  BOOST_REQUIRE_EQUAL(pp[0].size(), pq[0].size());
  for (std::size_t j = 0; j < pp[0].size(); ++j) {
    BOOST_TEST(pp[0][j].token == pq[0][j].token);
    BOOST_TEST(pp[0][j].confidence == pq[0][j].confidence);
  }
}

BOOST_AUTO_TEST_CASE(gumbel_sampling_matches_cpu) {
  const auto p = params(cache_mode::dual, 0.8);
  expect_same_decodes(decode(gpu(), p, 2), decode(cpu(), p, 2), "temperature 0.8");
}

BOOST_AUTO_TEST_CASE(kv_cache_export_import_round_trips_and_interoperates_with_cpu) {
  auto gb = gpu();
  auto cb = cpu();
  canvas c = start(fixture().prompts[0], params(cache_mode::dual));
  auto gc = gb->make_cache();
  (void)gb->logits(c, c.next_step(), *gc);
  const std::string bytes = gc->export_bytes();
  BOOST_TEST(gc->bytes() > 0u);
  // The device's own dtype on the wire: bf16, the size of the device cache.
  BOOST_TEST((parse_kv_wire(bytes).dtype == kv_dtype::bf16));
  BOOST_TEST(bytes.size() == kv_header_bytes + gc->bytes());
  auto gc2 = gb->make_cache();
  gc2->import_bytes(bytes);
  BOOST_TEST(gc2->export_bytes() == bytes);
  // The CPU cache reads the same format; a reuse step on either side then agrees.
  auto cc = cb->make_cache();
  cc->import_bytes(bytes);
  const step_plan p = reuse_plan(c, cache_mode::dual);
  auto lg = gb->logits(c, p, *gc2);
  auto lc = cb->logits(c, p, *cc);
  BOOST_TEST(rel_l2(lg, lc) < logits_tolerance);
  BOOST_CHECK_THROW(gc2->import_bytes(bytes.substr(0, bytes.size() - 1)), std::invalid_argument);
  // An f32 cache from the CPU imports too (rounded to bf16) and decodes alike.
  auto gc3 = gb->make_cache();
  gc3->import_bytes(cc->export_bytes());
  BOOST_TEST(rel_l2(gb->logits(c, p, *gc3), lc) < logits_tolerance);
}

BOOST_AUTO_TEST_CASE(errors_name_the_problem) {
  auto gb = gpu();
  auto cb = cpu();
  canvas c = start(fixture().prompts[0], params(cache_mode::dual));
  auto foreign = cb->make_cache();
  std::vector<forward_item> items{{&c, c.next_step(), foreign.get()}};
  std::vector<std::vector<row_proposal>> props;
  BOOST_CHECK_THROW(gb->forward(items, props), std::invalid_argument);
  try {
    (void)upload_weights(*fixture().m, cuda_device_count() + 3);
    BOOST_FAIL("expected cuda_error");
  } catch (const cuda_error& e) {
    BOOST_TEST(std::string(e.what()).find("does not exist") != std::string::npos);
  }
  // Only a refresh may run part of the layers, logits need the last layer, and a range must
  // resume where the last one ended.
  auto gcache = gb->make_cache();
  auto plan = c.next_step();  // a refresh
  plan.layer1 = 1;
  BOOST_CHECK_THROW((void)gb->logits(c, plan, *gcache), std::invalid_argument);
  plan.layer0 = 2;
  plan.layer1 = -1;
  std::vector<forward_item> resume{{&c, plan, gcache.get()}};
  BOOST_CHECK_THROW(gb->forward(resume, props), std::invalid_argument);
  auto reuse = reuse_plan(c, cache_mode::dual);
  reuse.layer1 = 1;
  std::vector<forward_item> partial_reuse{{&c, reuse, gcache.get()}};
  BOOST_CHECK_THROW(gb->forward(partial_reuse, props), std::invalid_argument);
  cuda_backend_options o;
  o.shard = {0, 2};  // TP without a group
  BOOST_CHECK_THROW(make_cuda_backend(device_weights(), o), std::invalid_argument);
}
