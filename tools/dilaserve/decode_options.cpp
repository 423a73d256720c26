#include "dilaserve/decode_options.hpp"
#include "dilaserve/validators.hpp"

#if DLS_HAVE_CUDA
#include "gpu/cuda/cuda_backend.hpp"
#endif
#include "gpu/cpu_backend.hpp"

#include <sstream>
#include <stdexcept>

namespace dls::cli {

void decode_flags::add_to(CLI::App* sub, bool with_model) {
  if (with_model) sub->add_option("--model", model, "model folder (config.json, tokenizer.json, *.safetensors)");
  sub->add_option("--threshold", threshold, "confidence threshold tau for the threshold rule")->check(CLI::Range(0.0, 1.0));
  sub->add_flag("--one-per-step", one_per_step, "commit exactly one token per step (quota rule)");
  sub->add_option("--rule", rule, "commit rule: threshold, quota, factor, or Dream's margin, entropy or origin")
      ->check(CLI::IsMember({"threshold", "quota", "factor", "margin", "entropy", "origin"}));
  sub->add_option("--steps-per-block", steps_per_block,
                  "quota, margin, entropy and origin rules: steps per block (0 = block length)")
      ->check(dls::cli::non_negative);
  sub->add_option("--schedule", schedule,
                  "how many a quota, margin or entropy step commits: even, or Dream's dream_linear")
      ->check(CLI::IsMember({"even", "dream_linear"}));
  sub->add_option("--eps", eps, "Dream's eps: the last timestep of dream_linear and origin, in [0, 1)")
      ->check(dls::cli::last_timestep);
  sub->add_option("--factor", factor, "factor rule's f")->check(dls::cli::positive);
  sub->add_option("--block", block, "block length")->check(dls::cli::positive);
  sub->add_option("--cache", cache, "approximate KV cache: none, prefix or dual")
      ->check(CLI::IsMember({"none", "prefix", "dual"}));
  sub->add_option("--gen-length", gen_length, "answer region length in tokens")->check(dls::cli::positive);
  sub->add_option("--refresh-interval", refresh_interval, "also refresh every N steps inside a block (0 = only at block start)")
      ->check(dls::cli::non_negative);
  sub->add_option("--temperature", temperature, "0 = argmax; > 0 samples with Gumbel noise")->check(dls::cli::non_negative);
  sub->add_option("--seed", seed, "sampling seed");
  sub->add_option("--top-p", top_p, "Dream's top-p: choose and score tokens within this nucleus (1 = off)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--top-k", top_k, "Dream's top-k: choose and score tokens among the k most likely (0 = off)")
      ->check(dls::cli::non_negative);
  sub->add_option("--alg-temp", alg_temp,
                  "Dream's alg_temp: draw the positions to commit from softmax(score / T) (quota, margin, entropy; 0 = off)")
      ->check(dls::cli::non_negative);
  sub->add_option("--device", device, "engine backend: cpu, cuda or cuda:N");
}

gpu::decode_params decode_flags::params(int default_gen_length) const {
  gpu::decode_params p;
  p.gen_length = gen_length.value_or(default_gen_length);
  p.block_length = block;
  p.threshold = threshold;
  p.factor = factor;
  p.cache = gpu::parse_cache_mode(cache);
  p.refresh_interval = refresh_interval;
  p.temperature = temperature;
  p.seed = seed;
  p.top_p = top_p;
  p.top_k = top_k;
  p.alg_temp = alg_temp;
  p.schedule = gpu::parse_step_schedule(schedule);
  p.eps = eps;
  if (one_per_step) {
    if (!rule.empty() && rule != "quota") throw std::invalid_argument("--one-per-step conflicts with --rule " + rule);
    p.rule = gpu::commit_rule::quota;
    p.steps_per_block = 0;
  } else {
    p.rule = rule.empty() ? gpu::commit_rule::threshold : gpu::parse_commit_rule(rule);
    p.steps_per_block = steps_per_block;
  }
  if (auto why = p.validate(); !why.empty()) throw std::invalid_argument(why);
  return p;
}

std::string decode_flags::label() const {
  std::ostringstream s;
  if (one_per_step) s << "one-per-step";
  else if (rule == "quota" || rule == "margin" || rule == "entropy" || rule == "origin")
    s << rule << "(" << steps_per_block << "/block)";
  else if (rule == "factor") s << "factor=" << factor;
  else s << "tau=" << threshold;
  if (top_p < 1.0) s << " top_p=" << top_p;
  if (top_k > 0) s << " top_k=" << top_k;
  if (alg_temp > 0) s << " alg_temp=" << alg_temp;
  if (schedule != "even") s << " schedule=" << schedule;
  if (eps != gpu::dream_default_eps) s << " eps=" << eps;
  s << " cache=" << cache << " block=" << block;
  return s.str();
}

std::unique_ptr<gpu::backend> decode_flags::make_backend(std::shared_ptr<const gpu::model> m) const {
  if (device == "cpu") return gpu::make_cpu_backend(std::move(m));
  if (device.rfind("cuda", 0) == 0) {
    int index = 0;
    if (device.size() > 4) {
      if (device[4] != ':' || device.size() == 5 || device.find_first_not_of("0123456789", 5) != std::string::npos)
        throw std::invalid_argument("--device '" + device + "': expected cpu, cuda or cuda:N");
      index = std::stoi(device.substr(5));
    }
#if DLS_HAVE_CUDA
    int n = gpu::cuda_device_count();
    if (index >= n)
      throw std::invalid_argument("--device " + device + ": " + std::to_string(n) + " usable CUDA device(s) here");
    return gpu::make_cuda_backend(*m, index);
#else
    (void)index;
    throw std::invalid_argument("--device " + device + ": this build has no CUDA backend (nvcc was not found)");
#endif
  }
  throw std::invalid_argument("--device '" + device + "': expected cpu, cuda or cuda:N");
}

}  // namespace dls::cli
