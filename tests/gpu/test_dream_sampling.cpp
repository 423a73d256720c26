// Dream's sampler options beside the commit rules: top_p / top_k truncation of each position's
// token distribution (sample_tokens with top_p_logits and top_k_logits) and alg_temp, which draws
// the positions a quota, margin or entropy step commits. The PyTorch parity goldens
// (test_gpu_parity) cover truncation in whole decodes; these pin the exact semantics on small
// cases, the statistics of the position draws, determinism and the refusals.
#define BOOST_TEST_MODULE gpu_dream_sampling
#include "gpu/canvas.hpp"
#include "gpu/commit.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/cpu_kernels.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "gpu/tp_runner.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace dls::gpu;

namespace {

const std::string dream_dir = std::string(DLS_SOURCE_DIR) + "/tests/golden/parity/dream";

cpu::argmax_result truncated(const std::vector<float>& l, double top_p, int top_k,
                             proposal_score s = proposal_score::probability, double temperature = 0,
                             uint64_t seed = 0, int32_t suppressed = -1) {
  return cpu::propose_truncated(l.data(), static_cast<int>(l.size()), suppressed, temperature, seed, 0, 0, s, top_p,
                                top_k);
}

std::vector<float> logs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

decode_params dream_params(commit_rule rule) {
  decode_params p;
  p.gen_length = 16;
  p.block_length = 8;
  p.rule = rule;
  p.steps_per_block = 4;
  return p;
}

std::vector<int32_t> run(engine& e, const decode_params& p, std::vector<int64_t>* commits = nullptr) {
  auto m_mask = 252, m_eos = 248;  // tests/golden/parity/dream/config.json
  auto s = e.admit(canvas::start({3, 4, 5, 6, 7}, p, m_mask, m_eos));
  while (!s.c.finished) {
    auto r = e.step({&s});
    if (commits) commits->push_back(r[0].committed);
  }
  return s.c.ids;
}

}  // namespace

BOOST_AUTO_TEST_CASE(top_k_keeps_the_k_largest_logits_and_their_ties) {
  const std::vector<float> l{3, 2, 2, 1, 0};
  const double e3 = std::exp(3.0), e2 = std::exp(2.0);
  // top_k 2: the logit 2 ties with the 2nd largest, so both stay (top_k_logits removes only "<").
  auto r = truncated(l, 1.0, 2);
  BOOST_TEST(r.token == 0);
  BOOST_TEST(r.confidence == e3 / (e3 + 2 * e2), boost::test_tools::tolerance(1e-12));
  r = truncated(l, 1.0, 1);
  BOOST_TEST(r.confidence == 1.0);
  // Margin over the kept tokens; with one kept, p2 = 0.
  BOOST_TEST(truncated(l, 1.0, 1, proposal_score::margin).confidence == 1.0);
  BOOST_TEST(truncated(l, 1.0, 2, proposal_score::margin).confidence == (e3 - e2) / (e3 + 2 * e2),
             boost::test_tools::tolerance(1e-12));
  // Entropy: sum q log q over the kept tokens.
  const double q0 = e3 / (e3 + 2 * e2), q1 = e2 / (e3 + 2 * e2);
  BOOST_TEST(truncated(l, 1.0, 2, proposal_score::neg_entropy).confidence ==
                 q0 * std::log(q0) + 2 * q1 * std::log(q1),
             boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(top_p_keeps_the_token_that_crosses_it) {
  const auto l = logs({0.5, 0.3, 0.15, 0.05});
  // Cumulative 0.5, 0.8, 0.95: at 0.6 the nucleus is {0, 1} (the second token crosses 0.6).
  BOOST_TEST(truncated(l, 0.6, 0).confidence == 0.5 / 0.8, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(truncated(l, 0.45, 0).confidence == 1.0);
  BOOST_TEST(truncated(l, 0.9, 0).confidence == 0.5 / 0.95, boost::test_tools::tolerance(1e-6));
  // top_p first, then top_k inside the nucleus.
  BOOST_TEST(truncated(l, 0.9, 2).confidence == 0.5 / 0.8, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(truncated(l, 0.6, 3).confidence == 0.5 / 0.8, boost::test_tools::tolerance(1e-6));
  // The mask token takes no part: suppressing token 0 makes token 1 the top, and the nucleus is
  // taken of the rest (0.6, 0.3, 0.1).
  auto r = truncated(l, 0.65, 0, proposal_score::probability, 0, 0, 0);
  BOOST_TEST(r.token == 1);
  BOOST_TEST(r.confidence == 0.3 / 0.45, boost::test_tools::tolerance(1e-6));
  // Without truncation the result is propose()'s, bit for bit.
  for (auto s : {proposal_score::probability, proposal_score::margin, proposal_score::neg_entropy}) {
    auto a = cpu::propose(l.data(), 4, -1, 0, 0, 0, 0, s);
    auto b = truncated(l, 1.0, static_cast<int>(l.size()), s);
    BOOST_TEST(a.token == b.token);
    BOOST_TEST(a.confidence == b.confidence, boost::test_tools::tolerance(1e-6));
  }
}

// Dream's sample_tokens divides the logits by T before its softmax and ranks by that softmax;
// LLaDA's generate() ranks by the clean one. softmax(log p / T) is p^(1/T) renormalised, which
// is what these expectations are written from (to 1e-6: the logits are floats).
std::vector<double> tempered(const std::vector<double>& p, double t) {
  std::vector<double> w;
  double z = 0;
  for (double x : p) z += std::pow(x, 1.0 / t);
  for (double x : p) w.push_back(std::pow(x, 1.0 / t) / z);
  return w;
}

double entropy(const std::vector<double>& q, double eps) {
  double h = 0;
  for (double x : q)
    if (x > 0) h += x * std::log(x + eps);
  return h;
}

cpu::argmax_result dream(const std::vector<float>& l, proposal_score s, double temperature, uint64_t seed = 0) {
  return cpu::propose(l.data(), static_cast<int>(l.size()), -1, temperature, seed, 0, 0, s, sampler_family::dream);
}

BOOST_AUTO_TEST_CASE(dream_scores_with_the_distribution_it_samples_from) {
  const std::vector<double> p{0.5, 0.3, 0.2};
  const auto l = logs(p);
  const auto q = tempered(p, 2.0);  // 0.4155, 0.3218, 0.2628
  std::set<int32_t> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto r = dream(l, proposal_score::probability, 2.0, seed);
    seen.insert(r.token);
    BOOST_TEST(r.confidence == q[static_cast<std::size_t>(r.token)], boost::test_tools::tolerance(1e-6));
    // LLaDA's sampler draws the same token (the same Gumbel noise) and scores it unsoftened.
    auto c = cpu::propose(l.data(), 3, -1, 2.0, seed, 0, 0, proposal_score::probability, sampler_family::llada);
    BOOST_TEST(c.token == r.token);
    BOOST_TEST(c.confidence == p[static_cast<std::size_t>(r.token)], boost::test_tools::tolerance(1e-6));
  }
  BOOST_TEST(seen.size() == 3u);
  BOOST_TEST(dream(l, proposal_score::margin, 2.0).confidence == q[0] - q[1], boost::test_tools::tolerance(1e-6));
  BOOST_TEST(dream(l, proposal_score::neg_entropy, 2.0).confidence == entropy(q, 1e-10),
             boost::test_tools::tolerance(1e-6));
  // At temperature 0 the two families agree but for the entropy's 1e-10.
  for (auto s : {proposal_score::probability, proposal_score::margin}) {
    BOOST_TEST(dream(l, s, 0).confidence == cpu::propose(l.data(), 3, -1, 0, 0, 0, 0, s).confidence);
    BOOST_TEST(dream(l, s, 0).token == 0);
  }
  BOOST_TEST(dream(l, proposal_score::neg_entropy, 0).confidence == entropy(p, 1e-10),
             boost::test_tools::tolerance(1e-6));
  BOOST_TEST(dream(l, proposal_score::neg_entropy, 0).confidence != entropy(p, 0));
}

BOOST_AUTO_TEST_CASE(the_temperature_changes_which_position_dream_commits_first) {
  // Two masked positions. A: 0.5 and a tail of 50 tokens at 0.01; B: 0.7, 0.3. Cold, A has the
  // larger margin (0.49 against 0.4); at T 2 the tail flattens A (margin 0.106) below B (0.209),
  // so Dream's topk_margin commits B first where clean scores would commit A.
  std::vector<double> pa{0.5};
  pa.insert(pa.end(), 50, 0.01);
  const std::vector<double> pb{0.7, 0.3};
  const auto la = logs(pa), lb = logs(pb);
  const auto qa = tempered(pa, 2.0), qb = tempered(pb, 2.0);
  const double ma = dream(la, proposal_score::margin, 2.0).confidence;
  const double mb = dream(lb, proposal_score::margin, 2.0).confidence;
  BOOST_TEST(ma == qa[0] - qa[1], boost::test_tools::tolerance(1e-6));
  BOOST_TEST(mb == qb[0] - qb[1], boost::test_tools::tolerance(1e-6));
  std::vector<row_proposal> rows{{20, 0, ma}, {21, 0, mb}};
  BOOST_TEST((select_commits(rows, commit_rule::margin, 0, 1, 1.0) == std::vector<int32_t>{21}));
  // LLaDA's clean margins keep A first.
  auto clean = [](const std::vector<float>& l) {
    return cpu::propose(l.data(), static_cast<int>(l.size()), -1, 2.0, 0, 0, 0, proposal_score::margin).confidence;
  };
  rows = {{20, 0, clean(la)}, {21, 0, clean(lb)}};
  BOOST_TEST((select_commits(rows, commit_rule::margin, 0, 1, 1.0) == std::vector<int32_t>{20}));

  // The same for the entropy: A 0.97 with 300 tokens at 1e-4 is the more certain cold (-0.306
  // against B's 0.9, 0.1 at -0.325) and by far the less certain at T 2 (-4.85 against -0.562).
  std::vector<double> pc{0.97};
  pc.insert(pc.end(), 300, 1e-4);
  const std::vector<double> pd{0.9, 0.1};
  const double hc = dream(logs(pc), proposal_score::neg_entropy, 2.0).confidence;
  const double hd = dream(logs(pd), proposal_score::neg_entropy, 2.0).confidence;
  BOOST_TEST(hc == entropy(tempered(pc, 2.0), 1e-10), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(hd == entropy(tempered(pd, 2.0), 1e-10), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(hd > hc);
  BOOST_TEST(entropy(pc, 0) > entropy(pd, 0));
}

BOOST_AUTO_TEST_CASE(dream_truncates_and_scores_the_tempered_distribution) {
  const std::vector<double> p{0.5, 0.3, 0.15, 0.05};
  const auto l = logs(p);
  // At T 2: 0.379, 0.294, 0.208, 0.120; cumulative 0.379, 0.673, 0.880: top_p 0.8 keeps three,
  // and every score is taken of those three renormalised.
  const auto q = tempered(p, 2.0);
  const std::vector<double> kept{q[0] / (q[0] + q[1] + q[2]), q[1] / (q[0] + q[1] + q[2]),
                                 q[2] / (q[0] + q[1] + q[2])};
  auto cut = [&](proposal_score s, uint64_t seed, sampler_family f) {
    return cpu::propose_truncated(l.data(), 4, -1, 2.0, seed, 0, 0, s, 0.8, 0, f);
  };
  std::set<int32_t> seen;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    auto r = cut(proposal_score::probability, seed, sampler_family::dream);
    BOOST_TEST_REQUIRE(r.token < 3);
    seen.insert(r.token);
    BOOST_TEST(r.confidence == kept[static_cast<std::size_t>(r.token)], boost::test_tools::tolerance(1e-6));
    // LLaDA's family keeps its clean scores on the same candidates.
    auto c = cut(proposal_score::probability, seed, sampler_family::llada);
    BOOST_TEST(c.token == r.token);
    BOOST_TEST(c.confidence == p[static_cast<std::size_t>(r.token)] / 0.95, boost::test_tools::tolerance(1e-6));
  }
  BOOST_TEST(seen.size() == 3u);
  BOOST_TEST(cut(proposal_score::margin, 0, sampler_family::dream).confidence == kept[0] - kept[1],
             boost::test_tools::tolerance(1e-6));
  BOOST_TEST(cut(proposal_score::neg_entropy, 0, sampler_family::dream).confidence == entropy(kept, 1e-10),
             boost::test_tools::tolerance(1e-6));
  BOOST_TEST(cut(proposal_score::margin, 0, sampler_family::llada).confidence == (0.5 - 0.3) / 0.95,
             boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(the_cpu_backend_scores_by_the_checkpoints_family) {
  // The backend's proposals against scores the test takes itself of the backend's own logits:
  // Dream's tempered, LLaDA's clean, at temperature 1.5 for every ranking rule.
  const std::string llada_dir = std::string(DLS_SOURCE_DIR) + "/tests/golden/parity/llada";
  for (const auto& dir : {dream_dir, llada_dir}) {
    auto m = load_model(dir);
    const auto& cfg = m->config;
    const bool is_dream = cfg.arch == architecture::dream;
    auto b = make_cpu_backend(m);
    for (auto rule : {commit_rule::quota, commit_rule::margin, commit_rule::entropy}) {
      auto p = dream_params(rule);
      p.temperature = 1.5;
      p.seed = 21;
      auto c = canvas::start({3, 4, 5, 6, 7}, p, cfg.mask_id, cfg.eos_id);
      const auto plan = c.next_step(b->logit_shift());
      auto cache = b->make_cache();
      std::vector<std::vector<row_proposal>> props;
      b->forward({{&c, plan, cache.get()}}, props);
      auto fresh = b->make_cache();
      const auto logits = b->logits(c, plan, *fresh);
      BOOST_TEST_REQUIRE(props.size() == 1u);
      BOOST_TEST_REQUIRE(props[0].size() == 8u);
      const double t = is_dream ? p.temperature : 1.0;
      for (const auto& pr : props[0]) {
        const float* l = logits.data() + static_cast<std::size_t>(pr.position - cfg.logit_shift - plan.q0) *
                                             static_cast<std::size_t>(cfg.vocab_size);
        double mx = -INFINITY;
        for (int v = 0; v < cfg.vocab_size; ++v)
          if (v != cfg.mask_id) mx = std::max(mx, static_cast<double>(l[v]));
        std::vector<double> q;
        for (int v = 0; v < cfg.vocab_size; ++v)
          q.push_back(v == cfg.mask_id ? 0.0 : std::exp((l[v] - mx) / t));
        double z = 0;
        for (double x : q) z += x;
        for (double& x : q) x /= z;
        auto sorted = q;
        std::sort(sorted.rbegin(), sorted.rend());
        double want = q[static_cast<std::size_t>(pr.token)];
        if (rule == commit_rule::margin) want = sorted[0] - sorted[1];
        if (rule == commit_rule::entropy) want = entropy(q, is_dream ? 1e-10 : 0.0);
        BOOST_TEST_CONTEXT(architecture_name(cfg.arch) << " " << to_string(rule) << " row " << pr.position) {
          BOOST_TEST(std::fabs(pr.confidence - want) <= 1e-6 * std::fabs(want));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sampling_draws_only_inside_the_truncation) {
  // At temperature 2 the nucleus is taken of softmax(l / 2), which is flatter than softmax(l).
  const auto l = logs({0.6, 0.3, 0.07, 0.03});
  std::map<int, int> seen_t1, seen_t2;
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    ++seen_t1[truncated(l, 0.85, 0, proposal_score::probability, 1.0, seed).token];
    ++seen_t2[truncated(l, 0.85, 0, proposal_score::probability, 2.0, seed).token];
  }
  // T 1: cumulative 0.6, 0.9: nucleus {0, 1}, sampled 2:1.
  BOOST_TEST(seen_t1.size() == 2u);
  BOOST_TEST(std::abs(seen_t1[0] / 4000.0 - 2.0 / 3.0) < 0.03);
  // T 2: weights sqrt(p): 0.775, 0.548, 0.265, 0.173, normalised 0.44, 0.31, 0.15, 0.10: the
  // nucleus at 0.85 holds the first three.
  BOOST_TEST(seen_t2.size() == 3u);
  BOOST_TEST(seen_t2.count(3) == 0u);
  for (uint64_t seed = 0; seed < 200; ++seed)
    BOOST_TEST(truncated(l, 1.0, 1, proposal_score::probability, 5.0, seed).token == 0);
}

BOOST_AUTO_TEST_CASE(alg_temp_draws_positions_from_the_softmax_of_the_scores) {
  // Scores log 1, log 2, log 4 at alg_temp 1: the first draw is position 10, 11, 12 with
  // probability 1/7, 2/7, 4/7 (torch.multinomial's first draw).
  std::vector<row_proposal> m{{10, 1, std::log(1.0)}, {11, 1, std::log(2.0)}, {12, 1, std::log(4.0)}};
  std::map<int32_t, int> first;
  constexpr int draws = 20000;
  for (uint64_t seed = 0; seed < draws; ++seed) {
    auto c = sample_commits(m, 2, 1.0, seed, 7);
    BOOST_TEST_REQUIRE(c.size() == 2u);
    BOOST_TEST(c[0] != c[1]);
    ++first[c[0]];
  }
  // 0.015 is over four standard deviations of a proportion of 20,000 draws.
  BOOST_TEST(std::abs(first[10] / double(draws) - 1.0 / 7) < 0.015);
  BOOST_TEST(std::abs(first[11] / double(draws) - 2.0 / 7) < 0.015);
  BOOST_TEST(std::abs(first[12] / double(draws) - 4.0 / 7) < 0.015);
  // The same coordinates give the same draw; a cold alg_temp is the top-k of the scores.
  BOOST_TEST((sample_commits(m, 2, 1.0, 5, 7) == sample_commits(m, 2, 1.0, 5, 7)));
  BOOST_TEST((sample_commits(m, 2, 1e-9, 5, 7) == select_commits(m, commit_rule::quota, 0, 2, 1.0)));
  BOOST_TEST(sample_commits(m, 9, 1.0, 5, 7).size() == 3u);
  BOOST_TEST(sample_commits(m, 0, 1.0, 5, 7).size() == 1u);
}

BOOST_AUTO_TEST_CASE(alg_temp_draws_over_the_masked_positions_of_the_current_block) {
  // Dream's _sample draws over every masked position of its canvas, which is one block here when
  // block_length = gen_length; with shorter blocks, only the current block's positions may be
  // committed, so the draw stays inside it.
  auto m = load_model(dream_dir);
  engine e(make_cpu_backend(m));
  const int prompt = 5;
  for (int block : {16, 8}) {
    auto p = dream_params(commit_rule::quota);
    p.block_length = block;
    p.steps_per_block = block / 2;  // two commits per step
    p.alg_temp = 100;               // nearly uniform over the candidates
    std::set<int> drawn;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      p.seed = seed;
      auto s = e.admit(canvas::start({3, 4, 5, 6, 7}, p, 252, 248));
      e.step({&s});
      for (int i = prompt; i < s.c.length(); ++i)
        if (s.c.ids[static_cast<std::size_t>(i)] != 252) drawn.insert(i - prompt);
    }
    BOOST_TEST_CONTEXT("block " << block) {
      BOOST_TEST(*drawn.rbegin() < block);
      // 40 near-uniform draws leave none of the block's halves out.
      BOOST_TEST(*drawn.rbegin() >= block / 2);
      BOOST_TEST(*drawn.begin() < block / 2);
    }
  }
}

BOOST_AUTO_TEST_CASE(decodes_with_dream_options_are_deterministic_and_keep_the_quota) {
  auto m = load_model(dream_dir);
  engine e(make_cpu_backend(m));
  for (auto rule : {commit_rule::quota, commit_rule::margin, commit_rule::entropy}) {
    auto p = dream_params(rule);
    p.top_p = 0.9;
    p.top_k = 5;
    BOOST_TEST((run(e, p) == run(e, p)));  // temperature 0: argmax, nothing random
    p.alg_temp = 0.5;
    p.seed = 3;
    std::vector<int64_t> commits;
    auto a = run(e, p, &commits);
    BOOST_TEST((a == run(e, p)));  // seeded draws are reproducible
    // 8-token blocks over 4 steps: 2 commits per step, whichever positions are drawn.
    for (auto n : commits) BOOST_TEST(n == 2);
    // Other seeds draw other positions: at least one of a few answers differs.
    bool other = false;
    for (uint64_t seed = 4; seed < 12 && !other; ++seed) {
      p.seed = seed;
      other = run(e, p) != a;
    }
    BOOST_TEST(other, to_string(rule) << ": alg_temp 0.5 drew the same positions for 9 seeds");
  }
}

BOOST_AUTO_TEST_CASE(dream_options_travel_with_the_canvas_and_over_tensor_parallel_ranks) {
  auto m = load_model(dream_dir);
  auto p = dream_params(commit_rule::entropy);
  p.top_p = 0.8;
  p.top_k = 7;
  p.alg_temp = 0.25;
  p.seed = 11;
  auto c = canvas::start({3, 4, 5}, p, 252, 248);
  auto d = canvas::from_bytes(c.to_bytes());
  BOOST_TEST(d.params.top_p == 0.8);
  BOOST_TEST(d.params.top_k == 7);
  BOOST_TEST(d.params.alg_temp == 0.25);
  // A version 1 canvas (before these fields, v3's schedule byte and v4's eps) still loads, with them off.
  auto now = canvas::start({3, 4, 5}, decode_params{}, 252, 248).to_bytes();
  const std::size_t at = 4 + 4 + 4 * 5 + 1 + 8 + 4 + 8 + 1 + 4 + 8 + 8;  // after the seed
  auto v1 = now.substr(0, at) + now.substr(at + 8 + 4 + 8 + 1 + 8);
  const uint32_t one = 1;
  std::memcpy(v1.data() + 4, &one, 4);
  auto old = canvas::from_bytes(v1);
  BOOST_TEST(old.params.top_p == 1.0);
  BOOST_TEST(old.params.top_k == 0);
  BOOST_TEST(old.params.alg_temp == 0.0);
  BOOST_TEST((old.ids == canvas::from_bytes(now).ids));

  // Two TP ranks decode what one device decodes, sampled positions included.
  engine one_device(make_cpu_backend(m));
  const auto want = run(one_device, p);
  tp_runner two(m, 2);
  auto h = two.admit(canvas::start({3, 4, 5, 6, 7}, p, 252, 248));
  while (!two.view(h).finished) two.step({h});
  BOOST_TEST((two.view(h).ids == want));
  BOOST_TEST((two.view(1, h).ids == want));
}

BOOST_AUTO_TEST_CASE(unsupported_combinations_are_refused_in_one_line) {
  auto why = [](auto change) {
    decode_params p;
    change(p);
    return p.validate();
  };
  BOOST_TEST(why([](decode_params& p) { p.top_p = 0; }) == "top_p must lie in (0, 1]");
  BOOST_TEST(why([](decode_params& p) { p.top_p = 1.5; }) == "top_p must lie in (0, 1]");
  BOOST_TEST(why([](decode_params& p) { p.top_p = std::nan(""); }) == "top_p must lie in (0, 1]");
  BOOST_TEST(why([](decode_params& p) { p.top_k = -1; }) == "top_k must be >= 0 (0: no top-k truncation)");
  BOOST_TEST(why([](decode_params& p) { p.alg_temp = -1; }) == "alg_temp must be a finite number >= 0");
  BOOST_TEST(why([](decode_params& p) { p.alg_temp = std::nan(""); }) == "alg_temp must be a finite number >= 0");
  for (auto rule : {commit_rule::threshold, commit_rule::factor}) {
    auto w = why([rule](decode_params& p) {
      p.rule = rule;
      p.alg_temp = 1;
    });
    BOOST_TEST(w == std::string("alg_temp samples the positions of a fixed number of commits: it needs the quota, "
                                "margin or entropy rule, not ") +
                        to_string(rule));
    BOOST_TEST(w.find('\n') == std::string::npos);
  }
  for (auto rule : {commit_rule::quota, commit_rule::margin, commit_rule::entropy})
    BOOST_TEST(why([rule](decode_params& p) {
                 p.rule = rule;
                 p.alg_temp = 1;
                 p.top_p = 0.5;
                 p.top_k = 3;
               }).empty());
  decode_params bad;
  bad.rule = commit_rule::threshold;
  bad.alg_temp = 2;
  BOOST_CHECK_THROW(canvas::start({3}, bad, 252, 248), std::invalid_argument);
}
