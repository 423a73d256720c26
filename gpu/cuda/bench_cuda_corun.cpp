// bench_cuda_corun: what a reuse step running beside a refresh step costs each of them on one
// GPU, the number the simulator's co-running models need (docs/policies.md, "Co-running").
// Two CUDA backends share one copy of random bf16 LLaDA-8B-shaped weights, each with its own
// stream: one runs a refresh step of a P-token prompt, the other dual-cache reuse steps of a
// batch. Each is timed alone; then the reuse backend loops on a second host thread while the
// refresh steps are timed again, and the reuse steps that ran wholly inside them are kept.
//
//   bench_cuda_corun [--device N] [--refresh-prompt 2048] [--reuse-prompt 1024]
//                    [--batches 1,4,8] [--reps 7] [--small]
//
// Per reuse batch it prints the refresh step alone and beside the reuse loop, the tax
// 1 - alone / beside (the refresh's lost rate, the simulator's `co_run: {model: tax}`), and
// the reuse step alone and beside. Plain streams share every SM, so this measures the hardware's
// own co-scheduling, not a green-context partition.
#include "gpu/canvas.hpp"
#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/cuda/cuda_testing.hpp"
#include "gpu/model_config.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace dls::gpu;

namespace {

using clk = std::chrono::steady_clock;

struct options {
  int device = 0;
  int refresh_prompt = 2048;
  int reuse_prompt = 1024;
  std::vector<int> batches = {1, 4, 8};
  int reps = 7;
  bool small = false;  // a tiny shape, to smoke-test the harness quickly
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// A batch of canvases with random prompts, their caches on `b`, and the steps to time.
struct batch_steps {
  std::vector<canvas> canvases;
  std::vector<std::unique_ptr<kv_cache>> caches;
  std::vector<forward_item> refresh, reuse;
};

void make_steps(batch_steps& s, backend& b, const model_config& cfg, int prompt_len, int batch, std::mt19937& rng) {
  decode_params p;
  p.gen_length = 256;
  p.block_length = 32;
  p.rule = commit_rule::threshold;
  p.cache = cache_mode::dual;
  s.canvases.reserve(static_cast<std::size_t>(batch));  // forward_item keeps pointers into it
  for (int i = 0; i < batch; ++i) {
    std::vector<int32_t> prompt(static_cast<std::size_t>(prompt_len));
    for (auto& t : prompt) {
      do t = static_cast<int32_t>(rng() % static_cast<unsigned>(cfg.vocab_size));
      while (t == cfg.mask_id);
    }
    s.canvases.push_back(canvas::start(prompt, p, cfg.mask_id, cfg.eos_id));
    s.caches.push_back(b.make_cache());
  }
  for (int i = 0; i < batch; ++i) {
    const canvas& c = s.canvases[static_cast<std::size_t>(i)];
    step_plan plan = c.next_step();  // the block's first step: a refresh
    s.refresh.push_back({&c, plan, s.caches[static_cast<std::size_t>(i)].get()});
    plan.kind = step_kind::reuse;
    plan.q0 = plan.block0;
    plan.q1 = plan.block1;  // dual cache: only the block's rows
    s.reuse.push_back({&c, plan, s.caches[static_cast<std::size_t>(i)].get()});
  }
}

double time_step(backend& b, const std::vector<forward_item>& items, std::vector<std::vector<row_proposal>>& props) {
  const auto t0 = clk::now();
  b.forward(items, props);
  return std::chrono::duration<double>(clk::now() - t0).count();
}

int run(const options& o) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_cuda_corun: no usable CUDA device\n");
    return 2;
  }
  const model_config cfg = o.small ? cuda_testing::small_bench_config() : llada_8b_config();
  std::printf("device: %s\n", cuda_device_description(o.device).c_str());
  std::printf("model: d %d, layers %d, mlp %d (random bf16); refresh prompt %d, reuse prompt %d\n", cfg.d_model,
              cfg.n_layers, cfg.mlp_hidden, o.refresh_prompt, o.reuse_prompt);
  auto weights = make_random_cuda_weights(cfg, 1, o.device);
  auto rb = make_cuda_backend(weights);  // the refresh stream
  auto ub = make_cuda_backend(weights);  // the reuse stream
  std::mt19937 rng(23);
  batch_steps r;
  make_steps(r, *rb, cfg, o.refresh_prompt, 1, rng);
  std::vector<std::vector<row_proposal>> rprops, uprops;
  // The first forward of a shape runs eagerly, the second captures its CUDA graph; both happen
  // here, one stream at a time, so the timed ones only replay graphs.
  rb->forward(r.refresh, rprops);
  rb->forward(r.refresh, rprops);
  std::vector<double> alone;
  for (int i = 0; i < o.reps; ++i) alone.push_back(time_step(*rb, r.refresh, rprops));
  const double r_alone = median(alone);

  std::printf("\n| reuse batch | refresh alone ms | refresh beside ms | tax | reuse alone ms | reuse beside ms | reuse steps beside |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int batch : o.batches) {
    batch_steps u;
    make_steps(u, *ub, cfg, o.reuse_prompt, batch, rng);
    ub->forward(u.refresh, uprops);  // fills the caches the reuse steps read
    ub->forward(u.reuse, uprops);
    ub->forward(u.reuse, uprops);
    std::vector<double> u_alone;
    for (int i = 0; i < o.reps; ++i) u_alone.push_back(time_step(*ub, u.reuse, uprops));

    // The reuse loop runs until told to stop; each step records when it started and ended.
    std::atomic<bool> stop{false};
    std::atomic<int> started{0};
    std::vector<std::pair<clk::time_point, clk::time_point>> u_steps;
    std::thread loop([&] {
      std::vector<std::vector<row_proposal>> props;
      while (!stop.load()) {
        const auto t0 = clk::now();
        ub->forward(u.reuse, props);
        u_steps.push_back({t0, clk::now()});
        started.fetch_add(1);
      }
    });
    while (started.load() < 2) std::this_thread::yield();  // the loop is in its stride
    std::vector<double> beside;
    const auto w0 = clk::now();
    for (int i = 0; i < o.reps; ++i) beside.push_back(time_step(*rb, r.refresh, rprops));
    const auto w1 = clk::now();
    stop.store(true);
    loop.join();
    std::vector<double> u_beside;
    for (const auto& [a, b] : u_steps)
      if (a >= w0 && b <= w1) u_beside.push_back(std::chrono::duration<double>(b - a).count());
    const double r_beside = median(beside);
    std::printf("| %d | %.2f | %.2f | %.3f | %.2f | %.2f | %zu |\n", batch, r_alone * 1e3, r_beside * 1e3,
                1.0 - r_alone / r_beside, median(u_alone) * 1e3, median(u_beside) * 1e3, u_beside.size());
    std::fflush(stdout);
  }
  std::printf("\ntax = 1 - refresh alone / beside: the simulator's co_run: {model: tax, tax: ...} (docs/policies.md)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--device") {
        o.device = std::stoi(next());
      } else if (a == "--refresh-prompt") {
        o.refresh_prompt = std::stoi(next());
      } else if (a == "--reuse-prompt") {
        o.reuse_prompt = std::stoi(next());
      } else if (a == "--batches") {
        o.batches.clear();
        std::stringstream ss(next());
        std::string item;
        while (std::getline(ss, item, ','))
          if (!item.empty()) o.batches.push_back(std::stoi(item));
      } else if (a == "--reps") {
        o.reps = std::stoi(next());
      } else if (a == "--small") {
        o.small = true;
      } else {
        throw std::invalid_argument("unknown option " + a);
      }
    }
    if (o.reps < 1 || o.refresh_prompt < 1 || o.reuse_prompt < 1 || o.batches.empty())
      throw std::invalid_argument("--reps, the prompts and --batches must be positive");
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "bench_cuda_corun: %s\nusage: bench_cuda_corun [--device N] [--refresh-prompt 2048] "
                 "[--reuse-prompt 1024] [--batches 1,4,8] [--reps 7] [--small]\n",
                 e.what());
    return 1;
  }
}
