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
#include <map>
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
  // A version 1 canvas (before these fields) still loads, with them off.
  auto v2 = canvas::start({3, 4, 5}, decode_params{}, 252, 248).to_bytes();
  const std::size_t at = 4 + 4 + 4 * 5 + 1 + 8 + 4 + 8 + 1 + 4 + 8 + 8;  // after the seed
  auto v1 = v2.substr(0, at) + v2.substr(at + 8 + 4 + 8);
  const uint32_t one = 1;
  std::memcpy(v1.data() + 4, &one, 4);
  auto old = canvas::from_bytes(v1);
  BOOST_TEST(old.params.top_p == 1.0);
  BOOST_TEST(old.params.top_k == 0);
  BOOST_TEST(old.params.alg_temp == 0.0);
  BOOST_TEST((old.ids == canvas::from_bytes(v2).ids));

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
