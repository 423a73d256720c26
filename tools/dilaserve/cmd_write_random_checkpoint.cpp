// dilaserve write-random-checkpoint: a random-weight bf16 checkpoint shaped like LLaDA-8B or
// Dream-7B (any depth, optionally narrower), in the published layout, for loading, memory and
// speed measurements where the real weights cannot be downloaded. Narrow copies keep the published
// vocabulary and special ids, so the real tokenizer files of the family can be served with them.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/validators.hpp"
#include "gpu/checkpoint_writer.hpp"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>
#include <stdexcept>
#include <string>

namespace {

namespace fs = std::filesystem;

struct write_options {
  std::string shape;
  std::string dir;
  int layers = 0;  // 0: the published depth
  // 0: the published width.
  int hidden = 0, heads = 0, kv_heads = 0, mlp = 0;
  uint64_t seed = 1;
  // save_pretrained's default max_shard_size ("5GB"), so a full-depth copy shards like the real ones.
  int64_t shard_mb = 5000;
};

std::string gigabytes(std::uintmax_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return text;
}

int run_write(const write_options& o) {
  auto cfg = dls::gpu::published_shape(o.shape);
  if (o.layers > 0) cfg.n_layers = o.layers;
  if (o.hidden > 0) cfg.d_model = o.hidden;
  if (o.heads > 0) cfg.n_heads = o.heads;
  if (o.kv_heads > 0) cfg.n_kv_heads = o.kv_heads;
  else if (o.heads > 0 && cfg.arch == dls::gpu::architecture::llada) cfg.n_kv_heads = o.heads;
  if (o.mlp > 0) cfg.mlp_hidden = o.mlp;
  if (cfg.d_model % cfg.n_heads != 0)
    throw std::invalid_argument("--hidden-size " + std::to_string(cfg.d_model) + " is not a multiple of the " +
                                std::to_string(cfg.n_heads) + " heads");
  if (cfg.head_dim() % 2 != 0)  // RoPE rotates pairs of a head's dimensions
    throw std::invalid_argument("the head dimension " + std::to_string(cfg.head_dim()) + " must be even");
  if (cfg.n_kv_heads > cfg.n_heads || cfg.n_heads % cfg.n_kv_heads != 0)
    throw std::invalid_argument("--kv-heads " + std::to_string(cfg.n_kv_heads) + " must divide the " +
                                std::to_string(cfg.n_heads) + " heads");
  // Refused before the first byte rather than when the disk fills: every weight is 2 bytes.
  const auto bytes = static_cast<std::uintmax_t>(2 * cfg.parameter_count());
  fs::path at = fs::absolute(o.dir);
  while (!fs::exists(at) && at.has_parent_path() && at != at.parent_path()) at = at.parent_path();
  std::error_code ec;
  const auto space = fs::space(at, ec);
  if (!ec && bytes > space.available)
    throw std::invalid_argument(o.dir + ": the checkpoint needs " + gigabytes(bytes) + " of bf16 weights, but " +
                                at.string() + " has " + gigabytes(space.available) + " free");
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
  // Bounds: 8x the published shapes' largest (32 layers, width 4096, 32 heads, MLP 18944), so
  // that the size check below cannot overflow and a typo is not taken for a model.
  sub->add_option("--layers", o->layers, "Transformer layers (default: the published depth)")
      ->check(CLI::Range(1, 256));
  sub->add_option("--hidden-size", o->hidden, "Model width (default: the published one)")->check(CLI::Range(1, 32768));
  sub->add_option("--heads", o->heads, "Attention heads (default: the published count)")->check(CLI::Range(1, 256));
  sub->add_option("--kv-heads", o->kv_heads, "Key/value heads (default: the published count; LLaDA: --heads)")
      ->check(CLI::Range(1, 256));
  sub->add_option("--mlp", o->mlp, "MLP hidden size (default: the published one)")->check(CLI::Range(1, 151552));
  sub->add_option("--seed", o->seed, "Seed of the weights");
  sub->add_option("--shard-mb", o->shard_mb, "Largest shard, in MB (10^6 bytes)")->check(dls::cli::positive);
  sub->add_option("dir", o->dir, "Folder to write")->required();
  return std::function<int()>([o] { return run_write(*o); });
}};

}  // namespace
