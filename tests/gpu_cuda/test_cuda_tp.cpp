// TP = 2 against TP = 1 on two GPUs (NCCL all-reduce); skipped with fewer than two. Also
// splits the group into two TP = 1 backends and merges it again with fresh communicators.
#define BOOST_TEST_MODULE cuda_tp
#include "cuda_test_support.hpp"
#include "model_fixture.hpp"

#include "gpu/engine.hpp"

#include <exception>
#include <functional>
#include <thread>

using namespace dls::gpu;
using namespace dls_test;

DLS_CUDA_TEST_MAIN(2)

namespace {

const test_model& fixture() {
  static test_model t = load_test_model();
  return t;
}

std::shared_ptr<const cuda_weights> weights_on(int device) {
  static std::shared_ptr<const cuda_weights> w[2];
  if (!w[device]) w[device] = upload_weights(*fixture().m, device);
  return w[device];
}

decode_params params(cache_mode mode) {
  decode_params p;
  p.gen_length = fixture().gen_length;
  p.block_length = fixture().block_length;
  p.rule = commit_rule::threshold;
  p.threshold = 0.9;
  p.cache = mode;
  return p;
}

std::vector<canvas> decode_on(backend& b, const decode_params& p) {
  // engine owns its backend; wrap a non-owning view.
  struct view final : backend {
    backend& inner;
    explicit view(backend& b) : inner(b) {}
    std::string name() const override { return inner.name(); }
    shard_spec shard() const override { return inner.shard(); }
    int layers() const override { return inner.layers(); }
    std::unique_ptr<kv_cache> make_cache() override { return inner.make_cache(); }
    void forward(const std::vector<forward_item>& items, std::vector<std::vector<row_proposal>>& out) override {
      inner.forward(items, out);
    }
    std::vector<float> logits(const canvas& c, const step_plan& plan, kv_cache& cache) override {
      return inner.logits(c, plan, cache);
    }
  };
  engine e(std::make_unique<view>(b));
  std::vector<request_slot> slots;
  const auto& c = fixture().m->config;
  for (const auto& prompt : fixture().prompts) slots.push_back(e.admit(canvas::start(prompt, p, c.mask_id, c.eos_id)));
  decode_all(e, slots, 2);
  std::vector<canvas> out;
  for (auto& s : slots) out.push_back(s.c);
  return out;
}

/// Runs f(0) and f(1) on two threads (TP ranks must call in lockstep); rethrows the first error.
void on_both_ranks(const std::function<void(int)>& f) {
  std::exception_ptr err[2];
  std::thread t([&] {
    try {
      f(1);
    } catch (...) {
      err[1] = std::current_exception();
    }
  });
  try {
    f(0);
  } catch (...) {
    err[0] = std::current_exception();
  }
  t.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
}

std::unique_ptr<backend> tp_backend(nccl_group& g, int rank) {
  cuda_backend_options o;
  o.shard = {rank, 2};
  o.group = &g;
  return make_cuda_backend(weights_on(rank), o);
}

}  // namespace

BOOST_AUTO_TEST_CASE(tp2_matches_tp1) {
  auto single = make_cuda_backend(weights_on(0));
  for (auto mode : {cache_mode::none, cache_mode::dual}) {
    auto ref = decode_on(*single, params(mode));
    std::vector<canvas> got[2];
    {
      nccl_group g({0, 1});
      std::unique_ptr<backend> b[2] = {tp_backend(g, 0), tp_backend(g, 1)};
      on_both_ranks([&](int r) { got[r] = decode_on(*b[r], params(mode)); });
    }  // backends, then communicators, are destroyed: a split
    for (std::size_t i = 0; i < ref.size(); ++i) {
      BOOST_TEST_CONTEXT("cache " << to_string(mode) << " prompt " << i) {
        BOOST_TEST(got[0][i].ids == got[1][i].ids, boost::test_tools::per_element());  // ranks in lockstep
        BOOST_TEST(got[0][i].ids == ref[i].ids, boost::test_tools::per_element());
        BOOST_TEST(got[0][i].steps == ref[i].steps);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(tp2_logits_match_tp1_and_groups_regroup) {
  const auto& c = fixture().m->config;
  canvas cv = canvas::start(fixture().prompts[0], params(cache_mode::dual), c.mask_id, c.eos_id);
  auto single = make_cuda_backend(weights_on(0));
  auto sc = single->make_cache();
  auto ref = single->logits(cv, cv.next_step(), *sc);
  for (int round = 0; round < 2; ++round) {  // merge, split, merge again: fresh communicators
    nccl_group g({0, 1});
    BOOST_TEST(g.world() == 2);
    std::unique_ptr<backend> b[2] = {tp_backend(g, 0), tp_backend(g, 1)};
    std::vector<float> got[2];
    on_both_ranks([&](int r) {
      auto cache = b[r]->make_cache();
      got[r] = b[r]->logits(cv, cv.next_step(), *cache);
    });
    BOOST_TEST(got[0] == got[1], boost::test_tools::per_element());
    BOOST_TEST(rel_l2(got[0], ref) < 1e-2);
  }
}
