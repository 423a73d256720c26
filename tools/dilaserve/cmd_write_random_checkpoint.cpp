// dilaserve write-random-checkpoint: a random-weight bf16 checkpoint shaped like LLaDA-8B or
// Dream-7B (any depth), in the published layout, for loading, memory and speed measurements
// where the real weights cannot be downloaded.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/validators.hpp"
#include "gpu/checkpoint_writer.hpp"

#include <cstdio>
#include <memory>

namespace {

struct write_options {
  std::string shape;
  std::string dir;
  int layers = 0;  // 0: the published depth
  uint64_t seed = 1;
  // save_pretrained's default max_shard_size ("5GB"), so a full-depth copy shards like the real ones.
  int64_t shard_mb = 5000;
};

int run_write(const write_options& o) {
  auto cfg = dls::gpu::published_shape(o.shape);
  if (o.layers > 0) cfg.n_layers = o.layers;
  const auto s = dls::gpu::write_random_checkpoint(o.dir, cfg, o.seed, o.shard_mb * 1000 * 1000);
  std::printf("%s: %s shape, %d layers, %lld tensors, %.2f GB of bf16 weights in %d shard(s)\n", o.dir.c_str(),
              o.shape.c_str(), cfg.n_layers, static_cast<long long>(s.tensors), static_cast<double>(s.weight_bytes) / 1e9,
              s.shards);
  return 0;
}

dls::cli::register_command reg{"write-random-checkpoint", [](CLI::App& app) {
  auto* sub = app.add_subcommand("write-random-checkpoint",
                                 "Write a random bf16 checkpoint shaped like LLaDA-8B or Dream-7B (HF layout)");
  auto o = std::make_shared<write_options>();
  sub->add_option("--shape", o->shape, "llada-8b or dream-7b")->required()->check(CLI::IsMember({"llada-8b", "dream-7b"}));
  sub->add_option("--layers", o->layers, "Transformer layers (default: the published depth)")->check(dls::cli::positive);
  sub->add_option("--seed", o->seed, "Seed of the weights");
  sub->add_option("--shard-mb", o->shard_mb, "Largest shard, in MB (10^6 bytes)")->check(dls::cli::positive);
  sub->add_option("dir", o->dir, "Folder to write")->required();
  return std::function<int()>([o] { return run_write(*o); });
}};

}  // namespace
