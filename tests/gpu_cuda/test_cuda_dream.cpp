// The Dream architecture on the CUDA backend (grouped-query attention, QKV bias, the logit shift,
// tied and untied heads) against the CPU goldens of tests/golden/parity, which the CPU backend
// matches to 1e-4 (test_gpu_parity): logits of a refresh and of a shifted dual-cache reuse step
// within the bf16 tolerance, proposals in lockstep with the CPU backend at the same positions,
// and temperature-0 decodes token for token where the checkpoint's margins are far above bf16's
// rounding. Skipped (exit 77) without a GPU.
#define BOOST_TEST_MODULE cuda_dream
#include "cuda_test_support.hpp"
#include "../gpu/golden_params.hpp"

#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

using namespace dls::gpu;
using namespace dls_test;

DLS_CUDA_TEST_MAIN(1)

namespace {

// bf16 weights and activations against the f32 reference, as in test_cuda_model.
constexpr double logits_tolerance = 3e-2;

const std::string parity_dir = std::string(DLS_SOURCE_DIR) + "/tests/golden/parity";

nlohmann::json goldens(const std::string& name) {
  std::ifstream f(parity_dir + "/" + name + "/goldens.json");
  BOOST_REQUIRE_MESSAGE(f.good(), "cannot read " << parity_dir << "/" << name << "/goldens.json");
  return nlohmann::json::parse(f);
}

std::vector<float> as_floats(const nlohmann::json& j) {
  std::vector<float> v;
  for (const auto& x : j) v.push_back(x.get<float>());
  return v;
}

// What the CUDA backend ranks by: top-1 probabilities without truncation.
bool cuda_runs(const decode_params& p) { return score_of(p.rule) == proposal_score::probability && !p.truncates(); }

}  // namespace

BOOST_AUTO_TEST_CASE(dream_logits_match_the_goldens_on_refresh_and_shifted_reuse) {
  for (const char* name : {"dream", "dream-tied"}) {
    auto m = load_model(parity_dir + "/" + name);
    BOOST_TEST_REQUIRE(m->config.logit_shift == 1);
    auto gb = make_cuda_backend(*m, 0);
    BOOST_TEST(gb->logit_shift() == 1);
    const auto g = goldens(name)["forward"];
    // The goldens' canvas as test_gpu_parity builds it: a half-decoded first block.
    const canvas c = dls::gpu::test::golden_canvas(g, m->config);
    const step_plan full = dls::gpu::test::full_refresh(c);
    auto cache = gb->make_cache();
    const double refresh = rel_l2(gb->logits(c, full, *cache), as_floats(g["logits"]));
    BOOST_TEST(refresh < logits_tolerance, name << " refresh rel L2 " << refresh);
    // A dual-cache reuse of rows [q0, q1) (the row before the block included) against the
    // refresh's cache, after two more tokens changed.
    const auto& r = g["reuse"];
    const auto y = dls::gpu::test::golden_reuse_step(r, c);
    const double part = rel_l2(gb->logits(y.c, y.plan, *cache), as_floats(r["logits"]));
    BOOST_TEST(part < logits_tolerance, name << " reuse rel L2 " << part);
  }
}

BOOST_AUTO_TEST_CASE(dream_proposals_agree_with_the_cpu_in_lockstep) {
  // Both backends see the same canvas at every step (the CPU's commits), so a wrong shift would
  // propose other tokens at the same positions far more often than bf16 rounding does.
  for (const char* name : {"dream", "dream-tied"}) {
    auto m = load_model(parity_dir + "/" + name);
    auto cb = make_cpu_backend(m);
    auto gb = make_cuda_backend(*m, 0);
    std::size_t rows = 0, mismatches = 0;
    double max_dconf = 0;
    const auto g = goldens(name);  // kept: a range over goldens(name)["decodes"] would outlive the json
    for (const auto& d : g["decodes"]) {
      const auto p = dls::gpu::test::golden_decode_params(d);
      if (!cuda_runs(p)) continue;
      canvas c = canvas::start(d["prompt_ids"].get<std::vector<int32_t>>(), p, m->config.mask_id, m->config.eos_id);
      auto cc = cb->make_cache();
      auto gc = gb->make_cache();
      while (!c.finished) {
        const step_plan plan = c.next_step(1);
        std::vector<std::vector<row_proposal>> pc, pg;
        cb->forward({{&c, plan, cc.get()}}, pc);
        gb->forward({{&c, plan, gc.get()}}, pg);
        BOOST_REQUIRE_EQUAL(pg[0].size(), pc[0].size());
        for (std::size_t j = 0; j < pc[0].size(); ++j) {
          BOOST_REQUIRE_EQUAL(pg[0][j].position, pc[0][j].position);
          ++rows;
          mismatches += pg[0][j].token != pc[0][j].token;
          max_dconf = std::max(max_dconf, std::fabs(pg[0][j].confidence - pc[0][j].confidence));
        }
        c.apply(pc[0]);
      }
    }
    BOOST_TEST_MESSAGE(name << ": " << rows << " proposals, " << mismatches << " token mismatches, max |dconf| "
                            << max_dconf);
    BOOST_TEST(rows > 0u);
    BOOST_TEST(mismatches * 50 <= rows, name << ": " << mismatches << " of " << rows << " proposals differ");
    BOOST_TEST(max_dconf < 0.05);
  }
}

// Decodes every golden the CUDA backend can run and checks answer and step count; returns how
// many it ran.
template <class Model, class Goldens>
int decodes_like_the_goldens(engine& e, const Model& m, const Goldens& list) {
  int n = 0;
  for (const auto& d : list) {
    const auto p = dls::gpu::test::golden_decode_params(d);
    if (!cuda_runs(p)) continue;
    auto s = e.admit(canvas::start(d["prompt_ids"].template get<std::vector<int32_t>>(), p, m.config.mask_id,
                                   m.config.eos_id));
    while (!s.c.finished) e.step({&s});
    const std::string what = d["label"].template get<std::string>() + " cache=" + d["cache"].template get<std::string>();
    BOOST_TEST((s.c.answer() == d["answer_ids"].template get<std::vector<int32_t>>()), what);
    BOOST_TEST(s.c.steps == d["steps"].template get<int64_t>(), what);
    ++n;
  }
  return n;
}

BOOST_AUTO_TEST_CASE(tied_dream_decodes_the_goldens_token_for_token) {
  // dream-tied's top-1 logits lead the next by 5 or more, far beyond bf16's rounding, so its
  // decodes must come out as the CPU's. (The untied copy's smallest margins are 0.08: lockstep
  // agreement above is its check.)
  auto m = load_model(parity_dir + "/dream-tied");
  engine e(make_cuda_backend(*m, 0));
  const int n = decodes_like_the_goldens(e, *m, goldens("dream-tied")["decodes"]);
  BOOST_TEST(n == 45);  // 3 prompts x {quota, one/step, tau 0.9, tau 0.5, factor 1} x 3 cache modes
}

BOOST_AUTO_TEST_CASE(tied_dream_decodes_the_schedule_goldens_and_origin_as_the_cpu_does) {
  // Dream's schedule and origin are the canvas's (host) arithmetic over the backend's proposals:
  // the CUDA backend runs them with top-1 proposals, so maskgit_plus under the schedule must
  // decode the goldens, and origin the CPU's tokens (the same hash draws the same positions).
  auto m = load_model(parity_dir + "/dream-tied");
  engine e(make_cuda_backend(*m, 0));
  const int n = decodes_like_the_goldens(e, *m, goldens("dream-tied")["schedule_decodes"]);
  BOOST_TEST(n == 27);  // 3 prompts x {maskgit_plus 4, 12, 6 over the whole answer} x 3 cache modes
  engine cpu(make_cpu_backend(m));
  decode_params p;
  p.gen_length = 16;
  p.block_length = 16;
  p.rule = commit_rule::origin;
  p.steps_per_block = 5;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    p.seed = seed;
    auto g = e.admit(canvas::start({3, 4, 5}, p, m->config.mask_id, m->config.eos_id));
    auto c = cpu.admit(canvas::start({3, 4, 5}, p, m->config.mask_id, m->config.eos_id));
    while (!g.c.finished) e.step({&g});
    while (!c.c.finished) cpu.step({&c});
    BOOST_TEST((g.c.ids == c.c.ids), "origin seed " << seed);
  }
}

BOOST_AUTO_TEST_CASE(what_the_cuda_backend_cannot_rank_by_is_refused) {
  auto m = load_model(parity_dir + "/dream");
  engine e(make_cuda_backend(*m, 0));
  decode_params p;
  p.gen_length = 16;
  p.block_length = 8;
  p.rule = commit_rule::entropy;
  auto s = e.admit(canvas::start({3, 4, 5}, p, m->config.mask_id, m->config.eos_id));
  BOOST_CHECK_THROW(e.step({&s}), std::invalid_argument);
  p.rule = commit_rule::quota;
  p.top_p = 0.9;
  auto t = e.admit(canvas::start({3, 4, 5}, p, m->config.mask_id, m->config.eos_id));
  BOOST_CHECK_THROW(e.step({&t}), std::invalid_argument);
}
