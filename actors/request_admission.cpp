#include "actors/request_admission.hpp"

#include "gpu/model_config.hpp"
#include "gpu/tokenizer.hpp"

#include <exception>

namespace dls::actors {

std::shared_ptr<const runtime::request_checker> make_request_checker(const runtime::cluster_config& cfg,
                                                                     std::string* problem) {
  runtime::model_bounds model;
  try {
    model.max_seq = gpu::load_model_config(cfg.model_path + "/config.json").max_seq;
    std::shared_ptr<const gpu::tokenizer> tok = gpu::load_tokenizer(cfg.model_path);
    model.count_tokens = [tok](const std::string& text) { return static_cast<int64_t>(tok->encode(text).size()); };
  } catch (const std::exception& e) {
    model = {};
    if (problem) *problem = e.what();
  }
  return std::make_shared<const runtime::request_checker>(cfg.limits, cfg.engine.gen_length, std::move(model));
}

std::optional<runtime::answer> refusal(const runtime::request_checker& checker, const runtime::submit_spec& spec) {
  auto why = checker.check(spec.prompt, spec.threshold, spec.gen_length);
  if (why.empty()) return std::nullopt;
  runtime::answer a;
  a.error = "refused by the head: " + why;
  a.tag = spec.tag;
  return a;
}

}  // namespace dls::actors
