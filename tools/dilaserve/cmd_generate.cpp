// dilaserve generate: decode one prompt with the engine in this process and print the
// answer with its step statistics. With --chat (and --system), the prompt is the checkpoint's
// chat template (tokenizer_config.json) rendered for that conversation, and the answer ends at the
// template's end-of-turn token.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/decode_options.hpp"
#include "gpu/chat_template.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "gpu/hf_tokenizer.hpp"
#include "gpu/tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

namespace dls::cli {
namespace {

struct generate_options {
  decode_flags decode;
  std::string prompt;
  std::optional<std::string> chat, system;
  bool show_steps = false;
  bool show_prompt = false;
  bool json = false;
};

int run_generate(const generate_options& o) {
  auto params = o.decode.params(32);
  auto model = gpu::load_model(o.decode.model);
  auto tok = gpu::load_tokenizer(o.decode.model);
  std::string prompt = o.prompt;
  std::optional<int32_t> end_of_turn;
  if (o.chat) {
    auto tmpl = gpu::chat_template::from_checkpoint(o.decode.model);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (o.system) messages.push_back({{"role", "system"}, {"content", *o.system}});
    messages.push_back({{"role", "user"}, {"content", *o.chat}});
    prompt = tmpl.render(messages, true);
    const auto* hf = dynamic_cast<const gpu::hf_tokenizer*>(tok.get());
    const char* eot = tmpl.family() == gpu::chat_family::llama3   ? "<|eot_id|>"
                      : tmpl.family() == gpu::chat_family::chatml ? "<|im_end|>"
                                                                  : nullptr;
    if (hf && eot) end_of_turn = hf->token_id(eot);
    if (o.show_prompt) std::cout << prompt << "\n";
  }
  auto ids = tok->encode(prompt);
  if (ids.empty()) throw std::invalid_argument(o.chat ? "--chat renders an empty prompt" : "--prompt is empty");
  if (static_cast<int64_t>(ids.size()) + int64_t{params.gen_length} > int64_t{model->config.max_seq})
    throw std::invalid_argument("prompt + gen length exceed the model's max_sequence_length (" +
                                std::to_string(model->config.max_seq) + ")");
  gpu::engine eng(o.decode.make_backend(model));
  auto slot = eng.admit(gpu::canvas::start(ids, params, model->config.mask_id, model->config.eos_id));
  nlohmann::json steps = nlohmann::json::array();
  auto t0 = std::chrono::steady_clock::now();
  while (!slot.c.finished) {
    auto rep = eng.step({&slot})[0];
    steps.push_back({{"kind", gpu::to_string(rep.kind)},
                     {"query_rows", rep.query_rows},
                     {"key_rows", rep.key_rows},
                     {"committed", rep.committed},
                     {"ms", rep.seconds * 1e3}});
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& c = slot.c;
  auto answer_ids = c.answer();
  if (end_of_turn)
    answer_ids.erase(std::find(answer_ids.begin(), answer_ids.end(), *end_of_turn), answer_ids.end());
  std::string answer = tok->decode(answer_ids);
  if (o.json) {
    // The ids let a test see where a character's bytes fall between blocks.
    nlohmann::json j{{"answer", answer},
                     {"answer_ids", answer_ids},
                     {"prompt_tokens", ids.size()},
                     {"steps", c.steps},
                     {"refresh_steps", c.refresh_steps},
                     {"reuse_steps", c.reuse_steps},
                     {"tokens_committed", c.committed},
                     {"tokens_per_step", c.tokens_per_step()},
                     {"seconds", secs},
                     {"step_log", steps}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << answer << "\n";
  if (o.show_steps)
    for (std::size_t i = 0; i < steps.size(); ++i)
      std::printf("  step %2zu %-7s q=%-4d k=%-4d committed=%d  %.3f ms\n", i + 1,
                  steps[i]["kind"].get<std::string>().c_str(), steps[i]["query_rows"].get<int>(),
                  steps[i]["key_rows"].get<int>(), steps[i]["committed"].get<int>(), steps[i]["ms"].get<double>());
  std::printf("steps %lld (refresh %lld, reuse %lld)  tokens %lld  tokens/step %.2f  %.2f ms  [%s]\n",
              static_cast<long long>(c.steps), static_cast<long long>(c.refresh_steps),
              static_cast<long long>(c.reuse_steps), static_cast<long long>(c.committed), c.tokens_per_step(),
              secs * 1e3, o.decode.label().c_str());
  return 0;
}

register_command reg{"generate", [](CLI::App& app) {
  auto* sub = app.add_subcommand("generate", "decode one prompt on the local engine (CPU, or a GPU with --device cuda)");
  auto o = std::make_shared<generate_options>();
  o->decode.add_to(sub);
  auto* prompt = sub->add_option("--prompt", o->prompt, "prompt text, tokenized as it is");
  auto* chat = sub->add_option("--chat", o->chat, "a user message, put in the checkpoint's chat template");
  prompt->excludes(chat);
  sub->add_option("--system", o->system, "a system message before --chat")->needs(chat);
  sub->callback([prompt, chat] {
    if (prompt->count() == 0 && chat->count() == 0) throw CLI::RequiredError("--prompt or --chat");
  });
  sub->add_flag("--show-steps", o->show_steps, "print every step's kind, rows and time");
  sub->add_flag("--show-prompt", o->show_prompt, "print the rendered chat prompt first")->needs(chat);
  sub->add_flag("--json", o->json, "print one JSON object");
  return std::function<int()>([o] { return run_generate(*o); });
}};

}  // namespace
}  // namespace dls::cli
