#define BOOST_TEST_MODULE gpu_golden
// Parity with the PyTorch reference (tools/train_tiny_llada.py --goldens-only) on the shipped
// model: logits of a refresh and of a reuse step within 1e-4, and token-identical decodes at
// temperature 0 for every commit rule and cache mode.
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"
#include "golden_params.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace dls::gpu;

namespace {

const std::string model_dir = std::string(DLS_SOURCE_DIR) + "/models/tiny-llada";

nlohmann::json goldens() {
  std::ifstream f(std::string(DLS_SOURCE_DIR) + "/tests/golden/tiny_llada_goldens.json");
  BOOST_REQUIRE_MESSAGE(f.good(), "tests/golden/tiny_llada_goldens.json is missing");
  return nlohmann::json::parse(f);
}

float max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, float(std::fabs(a[i] - b[i])));
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_CASE(refresh_and_reuse_logits_match_pytorch) {
  auto g = goldens();
  auto m = load_model(model_dir);
  auto be = make_cpu_backend(m);
  for (const auto& f : g["forward"]) {
    const canvas c = dls::gpu::test::golden_canvas(f, m->config);
    const step_plan full = dls::gpu::test::full_refresh(c);
    auto cache = be->make_cache();
    auto logits = be->logits(c, full, *cache);
    float d = max_diff(logits, f["logits"].get<std::vector<double>>());
    BOOST_TEST(d <= 1e-4f, "refresh max |diff| " << d);
    const auto& r = f["reuse"];
    const auto y = dls::gpu::test::golden_reuse_step(r, c);
    auto rl = be->logits(y.c, y.plan, *cache);  // against the refresh's stale cache
    d = max_diff(rl, r["logits"].get<std::vector<double>>());
    BOOST_TEST(d <= 1e-4f, "reuse max |diff| " << d);
  }
}

BOOST_AUTO_TEST_CASE(decodes_match_pytorch_token_for_token) {
  auto g = goldens();
  auto m = load_model(model_dir);
  auto tok = load_tokenizer(model_dir);
  engine e(make_cpu_backend(m));
  int n = 0;
  for (const auto& d : g["decodes"]) {
    const auto p = dls::gpu::test::golden_decode_params(d);
    auto s = e.admit(canvas::start(tok->encode(d["prompt"]), p, m->config.mask_id, m->config.eos_id));
    while (!s.c.finished) e.step({&s});
    std::string what = d["prompt"].get<std::string>() + " " + d["label"].get<std::string>() + " cache=" +
                       d["cache"].get<std::string>();
    BOOST_TEST((s.c.answer() == d["answer_ids"].get<std::vector<int32_t>>()), what);
    BOOST_TEST(s.c.steps == d["steps"].get<int64_t>(), what);
    BOOST_TEST(s.c.refresh_steps == d["refresh_steps"].get<int64_t>(), what);
    BOOST_TEST(s.c.reuse_steps == d["reuse_steps"].get<int64_t>(), what);
    ++n;
  }
  BOOST_TEST(n >= 60);
}
