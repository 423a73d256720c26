// Dream's linear schedule (diffusion_generate's int(masks x (1 - s/t)) over linspace(1, 1e-3)) and
// its alg 'origin' (each mask committed with probability 1 - s/t). The counts must be torch's
// float32 arithmetic to the token (tests/golden/parity/dream_schedule.json, written by
// tools/dlm_reference.py); origin draws from the engine's hash, so its tests check properties:
// the last step commits every mask, the counts follow the binomial mean, seeds decide the draws,
// tokens at temperature 0 are the argmax, and a canvas moved mid-decode draws what it would have.
#define BOOST_TEST_MODULE gpu_dream_schedule
#include "gpu/canvas.hpp"
#include "gpu/commit.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/dream_schedule.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"

#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

using namespace dls::gpu;

namespace {

const std::string parity_dir = std::string(DLS_SOURCE_DIR) + "/tests/golden/parity";
constexpr int32_t mask_id = 252, eos_id = 248;  // tests/golden/parity/dream/config.json

nlohmann::json schedule_golden() {
  std::ifstream f(parity_dir + "/dream_schedule.json");
  BOOST_REQUIRE_MESSAGE(f.good(), "tests/golden/parity/dream_schedule.json is missing");
  return nlohmann::json::parse(f);
}

decode_params counted(commit_rule rule, int block, int steps) {
  decode_params p;
  p.gen_length = block;
  p.block_length = block;
  p.rule = rule;
  p.steps_per_block = steps;
  p.schedule = step_schedule::dream_linear;
  p.cache = cache_mode::none;
  return p;
}

// One step without a model: every masked row of the block proposes a token that is neither the
// mask nor EOS, scored by its position so that ranks are well defined.
int apply_step(canvas& c) {
  std::vector<row_proposal> props;
  for (int r = c.block_begin(); r < c.block_end(); ++r)
    if (c.ids[static_cast<std::size_t>(r)] == c.mask_id) props.push_back({r, 7, 1.0 / (1 + r)});
  return c.apply(props);
}

int masks_in_block(const canvas& c) {
  return static_cast<int>(std::count(c.ids.begin() + c.block_begin(), c.ids.begin() + c.block_end(), c.mask_id));
}

}  // namespace

BOOST_AUTO_TEST_CASE(timesteps_and_probabilities_are_torchs_float32_values) {
  const auto g = schedule_golden();
  int checked = 0;
  for (const auto& [n, ts] : g["timesteps"].items()) {
    const int steps = std::stoi(n);
    BOOST_REQUIRE_EQUAL(ts.size(), static_cast<std::size_t>(steps + 1));
    for (int i = 0; i <= steps; ++i) {
      // The golden holds float32 values widened to double, so the cast back is exact.
      BOOST_TEST(dream_timestep(steps, i, dream_default_eps) == static_cast<float>(ts[static_cast<std::size_t>(i)].get<double>()),
                 "steps " << steps << " point " << i);
      ++checked;
    }
  }
  BOOST_TEST(checked == 119);  // steps + 1 points for each of 1..14 steps
  for (const auto& row : g["table"]) {
    const int steps = row["steps"];
    for (int i = 0; i < steps; ++i)
      BOOST_TEST(dream_transfer_probability(steps, i, dream_default_eps) == static_cast<float>(row["p_transfer"][i].get<double>()),
                 "steps " << steps << " step " << i);
  }
}

BOOST_AUTO_TEST_CASE(commit_counts_are_dreams_for_every_mask_count_and_step_count) {
  const auto g = schedule_golden();
  int rows = 0, zero_steps = 0;
  for (const auto& row : g["table"]) {
    const int steps = row["steps"], masks = row["masks"];
    const auto want = row["counts"].get<std::vector<int>>();
    int left = masks;
    for (int i = 0; i < steps; ++i) {
      const int n = dream_transfer_count(left, steps, i, dream_default_eps);
      BOOST_TEST(n == want[static_cast<std::size_t>(i)], "steps " << steps << " masks " << masks << " step " << i);
      left -= n;
    }
    // The same counts through a canvas whose one block holds `masks` masks, for every counted rule.
    if (masks > 0) {
      for (auto rule : {commit_rule::quota, commit_rule::margin, commit_rule::entropy}) {
        auto c = canvas::start({3, 4}, counted(rule, masks, steps), mask_id, eos_id);
        std::vector<int> got;
        while (!c.finished) got.push_back(apply_step(c));
        BOOST_TEST((got == want), to_string(rule) << " steps " << steps << " masks " << masks);
        BOOST_TEST(c.steps == steps);
      }
    }
    zero_steps += static_cast<int>(std::count(want.begin(), want.end(), 0));
    ++rows;
  }
  BOOST_TEST(rows == 14 * 41);
  BOOST_TEST(zero_steps > 0, "the table has steps that commit nothing");
}

BOOST_AUTO_TEST_CASE(a_step_may_commit_nothing_and_the_last_step_commits_the_rest) {
  // 12 steps over 8 masks: int(8 x (1 - s/t)) is 0 on the first steps.
  auto c = canvas::start({3, 4, 5}, counted(commit_rule::quota, 8, 12), mask_id, eos_id);
  std::vector<int> got;
  while (!c.finished) {
    const int before = masks_in_block(c);
    const int n = apply_step(c);
    got.push_back(n);
    if (c.step_in_block == 0 || c.finished) BOOST_TEST(n == before, "the last step commits every mask left");
  }
  BOOST_TEST(got.size() == 12u);
  BOOST_TEST(got.front() == 0);
  BOOST_TEST(c.committed == 8);
  BOOST_TEST(c.steps == 12);
  // Semi-autoregressive: every block takes exactly its steps, zero-commit steps included.
  auto d = canvas::start({3, 4, 5}, [] {
    auto p = counted(commit_rule::quota, 8, 12);
    p.gen_length = 24;
    return p;
  }(), mask_id, eos_id);
  while (!d.finished) apply_step(d);
  BOOST_TEST(d.steps == 36);
  BOOST_TEST(d.committed == 24);
}

BOOST_AUTO_TEST_CASE(origin_commits_every_mask_on_the_last_step_and_within_its_steps) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto p = counted(commit_rule::origin, 16, 4);
    p.seed = seed;
    auto c = canvas::start({3, 4, 5}, p, mask_id, eos_id);
    while (!c.finished) {
      const int before = masks_in_block(c);
      const bool last = c.step_in_block == 3;
      const int n = apply_step(c);
      if (last) BOOST_TEST(n == before, "seed " << seed << ": p_transfer 1 commits every mask");
      if (!c.finished) BOOST_TEST(c.step_in_block <= 3);
    }
    BOOST_TEST(c.steps <= 4);
    BOOST_TEST(c.committed == 16);
  }
}

BOOST_AUTO_TEST_CASE(origin_counts_follow_the_binomial_mean) {
  // Given m masks left before step i, the step's count is Binomial(m, p_i): over independent
  // seeds the sum of the counts has mean sum(m p_i) and variance sum(m p_i (1 - p_i)). Four
  // standard deviations: a fair generator fails this with probability 6e-5 per step.
  constexpr int steps = 5, block = 24, seeds = 3000;
  std::vector<double> got(steps, 0.0), mean(steps, 0.0), var(steps, 0.0);
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    auto p = counted(commit_rule::origin, block, steps);
    p.seed = seed * 7919;
    auto c = canvas::start({3, 4, 5}, p, mask_id, eos_id);
    while (!c.finished) {
      const int i = c.step_in_block;
      BOOST_TEST_REQUIRE(i < steps, "seed " << seed << ": the block outlived its steps");
      const double m = masks_in_block(c), pt = dream_transfer_probability(steps, i, dream_default_eps);
      mean[static_cast<std::size_t>(i)] += m * pt;
      var[static_cast<std::size_t>(i)] += m * pt * (1 - pt);
      got[static_cast<std::size_t>(i)] += apply_step(c);
    }
  }
  for (int i = 0; i < steps - 1; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double z = (got[k] - mean[k]) / std::sqrt(var[k]);
    BOOST_TEST(std::fabs(z) < 4.0, "step " << i << ": " << got[k] << " commits, expected " << mean[k] << " (z " << z
                                            << ")");
  }
  BOOST_TEST(var[steps - 1] == 0.0, "the last step is certain");
  BOOST_TEST(got[steps - 1] == mean[steps - 1]);
}

BOOST_AUTO_TEST_CASE(origin_draws_depend_on_the_seed_only) {
  // The step at which each position was committed: 16 positions over 6 steps.
  auto decode = [](uint64_t seed) {
    auto p = counted(commit_rule::origin, 16, 6);
    p.seed = seed;
    auto c = canvas::start({3, 4, 5}, p, mask_id, eos_id);
    std::vector<int64_t> when(16, -1);
    while (!c.finished) {
      apply_step(c);
      for (int j = 0; j < 16; ++j)
        if (when[static_cast<std::size_t>(j)] < 0 && c.ids[static_cast<std::size_t>(3 + j)] != mask_id)
          when[static_cast<std::size_t>(j)] = c.steps;
    }
    return when;
  };
  BOOST_TEST((decode(5) == decode(5)));
  for (uint64_t seed = 6; seed < 16; ++seed)
    BOOST_TEST((decode(seed) != decode(5)), "seed " << seed << " drew what seed 5 drew");
}

BOOST_AUTO_TEST_CASE(origin_tokens_at_temperature_zero_are_the_argmax_of_their_position) {
  auto m = load_model(parity_dir + "/dream");
  engine e(make_cpu_backend(m));
  const int shift = e.device().logit_shift();
  const int V = m->config.vocab_size;
  auto p = counted(commit_rule::origin, 16, 5);
  p.seed = 3;
  auto s = e.admit(canvas::start({3, 4, 5, 6, 7}, p, m->config.mask_id, m->config.eos_id));
  auto probe = e.device().make_cache();
  int committed = 0;
  while (!s.c.finished) {
    const auto before = s.c;
    step_plan full;
    full.q1 = full.key_rows = before.length();
    const auto logits = e.device().logits(before, full, *probe);
    e.step({&s});
    for (int r = before.block_begin(); r < before.block_end(); ++r) {
      const auto u = static_cast<std::size_t>(r);
      if (before.ids[u] != before.mask_id || s.c.ids[u] == s.c.mask_id) continue;
      const float* row = logits.data() + static_cast<std::size_t>(r - shift) * static_cast<std::size_t>(V);
      int best = -1;
      for (int t = 0; t < V; ++t)
        if (t != m->config.mask_id && (best < 0 || row[t] > row[best])) best = t;
      BOOST_TEST(s.c.ids[u] == best, "row " << r);
      ++committed;
    }
  }
  BOOST_TEST(committed > 0);
}

BOOST_AUTO_TEST_CASE(origin_and_the_schedule_travel_with_the_canvas) {
  auto m = load_model(parity_dir + "/dream");
  engine e(make_cpu_backend(m));
  for (auto rule : {commit_rule::origin, commit_rule::entropy}) {
    auto p = counted(rule, 8, 5);
    p.gen_length = 16;
    p.temperature = 0.8;
    p.seed = 21;
    const std::vector<int32_t> prompt{3, 4, 5, 6, 7};
    auto whole = e.admit(canvas::start(prompt, p, m->config.mask_id, m->config.eos_id));
    while (!whole.c.finished) e.step({&whole});
    // Three steps here, then the canvas moves (every step is a refresh: no cache to carry).
    auto first = e.admit(canvas::start(prompt, p, m->config.mask_id, m->config.eos_id));
    for (int i = 0; i < 3; ++i) e.step({&first});
    const auto moved = canvas::from_bytes(first.c.to_bytes());
    BOOST_TEST((moved.params.rule == rule));
    BOOST_TEST((moved.params.schedule == step_schedule::dream_linear));
    engine other(make_cpu_backend(m));
    auto rest = other.admit(moved);
    while (!rest.c.finished) other.step({&rest});
    BOOST_TEST((rest.c.ids == whole.c.ids), to_string(rule));
    BOOST_TEST(rest.c.steps == whole.c.steps);
  }
}

BOOST_AUTO_TEST_CASE(older_canvases_load_with_the_even_schedule) {
  auto p = counted(commit_rule::quota, 8, 4);
  const auto v3 = canvas::start({3, 4, 5}, p, mask_id, eos_id).to_bytes();  // today's version (v4)
  // After magic, version, prompt_len, mask, EOS, gen/block length, rule, threshold, steps per block,
  // factor, cache, refresh interval, temperature, seed, top_p, top_k and alg_temp: the schedule byte.
  const std::size_t at = 4 + 4 + 4 * 5 + 1 + 8 + 4 + 8 + 1 + 4 + 8 + 8 + 8 + 4 + 8;
  BOOST_TEST(static_cast<uint8_t>(v3[at]) == static_cast<uint8_t>(step_schedule::dream_linear));
  auto v2 = v3.substr(0, at) + v3.substr(at + 1 + sizeof(double));  // without the schedule and v4's eps
  const uint32_t two = 2;
  std::memcpy(v2.data() + 4, &two, 4);
  const auto old = canvas::from_bytes(v2);
  BOOST_TEST((old.params.schedule == step_schedule::even));
  BOOST_TEST((old.ids == canvas::from_bytes(v3).ids));
  auto bad = v3;
  bad[at] = 2;
  BOOST_CHECK_EXCEPTION(canvas::from_bytes(bad), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()) == "canvas has an unknown schedule 2";
  });
  auto rule = v3;
  rule[4 + 4 + 4 * 5] = static_cast<char>(static_cast<uint8_t>(commit_rule::origin) + 1);
  BOOST_CHECK_THROW(canvas::from_bytes(rule), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(contradictory_settings_are_refused_in_one_line) {
  auto why = [](commit_rule rule, step_schedule s, double alg_temp = 0) {
    decode_params p;
    p.rule = rule;
    p.schedule = s;
    p.alg_temp = alg_temp;
    return p.validate();
  };
  BOOST_TEST(why(commit_rule::threshold, step_schedule::dream_linear) ==
             "schedule dream_linear sets how many a quota, margin or entropy step commits; the threshold rule chooses "
             "its own count");
  BOOST_TEST(why(commit_rule::factor, step_schedule::dream_linear).find("the factor rule chooses its own count") !=
             std::string::npos);
  BOOST_TEST(why(commit_rule::origin, step_schedule::even, 1.0) ==
             "alg_temp samples the positions of a fixed number of commits: it needs the quota, margin or entropy "
             "rule, not origin");
  for (auto rule : {commit_rule::quota, commit_rule::margin, commit_rule::entropy, commit_rule::origin})
    BOOST_TEST(why(rule, step_schedule::dream_linear).empty(), to_string(rule));
  BOOST_TEST(why(commit_rule::quota, step_schedule::dream_linear, 0.5).empty());
  BOOST_CHECK_EXCEPTION(parse_step_schedule("linear"), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()) == "unknown schedule 'linear' (even, dream_linear)";
  });
  BOOST_TEST((parse_step_schedule(to_string(step_schedule::dream_linear)) == step_schedule::dream_linear));
  BOOST_TEST((parse_commit_rule("origin") == commit_rule::origin));
}

BOOST_AUTO_TEST_CASE(eps_sets_the_last_timestep_of_the_schedule) {
  // linspace(1, 0.5, 3) = [1, 0.75, 0.5]: every value exact in float32.
  BOOST_TEST(dream_timestep(2, 0, 0.5) == 1.0f);
  BOOST_TEST(dream_timestep(2, 1, 0.5) == 0.75f);
  BOOST_TEST(dream_timestep(2, 2, 0.5) == 0.5f);
  BOOST_TEST(dream_timestep(4, 4, 0.1) == 0.1f, "the last point is eps itself");
  // 8 masks over 2 steps: int(8 x (1 - 0.75)) = 2 first at eps 0.5; int(8 x (1 - 0.5005)) = 3 at Dream's default.
  for (auto [eps, first] : {std::pair{0.5, 2}, std::pair{dream_default_eps, 3}}) {
    auto p = counted(commit_rule::quota, 8, 2);
    p.eps = eps;
    BOOST_TEST(p.validate() == "");
    auto c = canvas::start({3, 4}, p, mask_id, eos_id);
    BOOST_TEST(apply_step(c) == first, "eps " << eps);
    BOOST_TEST(apply_step(c) == 8 - first);
    BOOST_TEST(c.finished);
  }
  // Origin's probability of committing each mask on a step is 1 - s/t of the same timesteps.
  BOOST_TEST(dream_transfer_probability(2, 0, 0.5) == 0.25f);

  auto with = [](commit_rule rule, step_schedule s, double eps) {
    auto p = counted(rule, 8, 2);
    p.schedule = s;
    p.eps = eps;
    return p.validate();
  };
  BOOST_TEST(with(commit_rule::origin, step_schedule::even, 0.0) == "");
  for (double bad : {std::nan(""), 1.0, -0.1, std::numeric_limits<double>::infinity()})
    BOOST_TEST(with(commit_rule::quota, step_schedule::dream_linear, bad).find("eps must lie in [0, 1)") == 0u);
  BOOST_TEST(with(commit_rule::quota, step_schedule::even, 0.5).find("would change nothing") != std::string::npos);

  // A canvas keeps its eps across a move; one written before eps travelled (v3) loads with the default.
  auto p = counted(commit_rule::quota, 8, 2);
  p.eps = 0.25;
  auto c = canvas::start({3, 4}, p, mask_id, eos_id);
  std::string bytes = c.to_bytes();
  BOOST_TEST(canvas::from_bytes(bytes).params.eps == 0.25);
  const uint32_t v3 = 3;
  std::memcpy(bytes.data() + 4, &v3, sizeof v3);
  bytes.erase(91, sizeof(double));  // eps follows the schedule byte, at byte 91
  const auto old = canvas::from_bytes(bytes);
  BOOST_TEST(old.params.eps == dream_default_eps);
  BOOST_TEST((old.params.schedule == step_schedule::dream_linear));
  BOOST_TEST((old.ids == c.ids));
}
