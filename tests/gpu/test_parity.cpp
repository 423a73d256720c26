#define BOOST_TEST_MODULE gpu_parity
// Parity with the PyTorch reference of both checkpoint families (tools/dlm_reference.py) on
// random-weight checkpoints in their exact Hugging Face layouts (bf16 shards, index, config.json):
// LLaDA, Dream (grouped-query attention, QKV bias, the logit shift) and Dream with a tied head.
// They load through load_model, as a served model does; logits must match within 1e-4 and
// temperature-0 decodes token for token, with the same refresh and reuse counts, in every cache
// mode. Broken copies of them must fail to load with one line naming the file and the field.
#include "gpu/checkpoint_writer.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/kv_wire.hpp"
#include "gpu/model.hpp"
#include "gpu/tp_runner.hpp"
#include "gpu/safetensors.hpp"
#include "golden_params.hpp"
#include "test_support.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace dls::gpu;
namespace fs = std::filesystem;

namespace {

const std::string parity_dir = std::string(DLS_SOURCE_DIR) + "/tests/golden/parity";
const char* const families[] = {"llada", "dream", "dream-tied"};

nlohmann::json goldens(const std::string& name) {
  std::ifstream f(parity_dir + "/" + name + "/goldens.json");
  BOOST_REQUIRE_MESSAGE(f.good(), "tests/golden/parity/" << name << "/goldens.json is missing");
  return nlohmann::json::parse(f);
}

float max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, float(std::fabs(a[i] - b[i])));
  return worst;
}

std::string load_failure(const std::string& dir) {
  try {
    load_model(dir);
  } catch (const load_error& e) {
    return e.what();
  }
  return "(it loaded)";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A writable copy of one family's checkpoint.
struct copy_of {
  test::temp_dir tmp;
  explicit copy_of(const std::string& name) {
    for (const auto& e : fs::directory_iterator(parity_dir + "/" + name))
      fs::copy_file(e.path(), tmp.path + "/" + e.path().filename().string());
  }
  std::string dir() const { return tmp.path; }
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_configs_read_each_family_from_its_own_field_names) {
  auto l = load_model(parity_dir + "/llada")->config;
  BOOST_TEST((l.arch == architecture::llada));
  BOOST_TEST(l.logit_shift == 0);
  BOOST_TEST(!l.qkv_bias);
  BOOST_TEST(l.rope_theta == 500000.0f);
  BOOST_TEST(l.rms_eps == 1e-5f);
  auto m = load_model(parity_dir + "/dream");
  const auto& d = m->config;
  BOOST_TEST((d.arch == architecture::dream));
  BOOST_TEST(d.logit_shift == 1);
  BOOST_TEST(d.qkv_bias);
  BOOST_TEST(!d.tied_head);
  BOOST_TEST(d.n_heads == 4);
  BOOST_TEST(d.n_kv_heads == 2);
  BOOST_TEST(d.rope_theta == 1000000.0f);
  BOOST_TEST(d.rms_eps == 1e-6f);
  BOOST_TEST(d.mask_id == 252);
  BOOST_TEST(d.eos_id == 248);
  // bf16 matrices are used from the mapping, not widened to f32.
  BOOST_TEST(m->layers[0].q_proj == nullptr);
  BOOST_TEST(m->layers[0].bf16.q_proj != nullptr);
  BOOST_TEST(m->layers[0].q_bias != nullptr);
  auto t = load_model(parity_dir + "/dream-tied");
  BOOST_TEST(t->config.tied_head);
  BOOST_TEST(t->head_bf16 == t->wte_bf16);
  BOOST_TEST(t->config.parameter_count() + int64_t{t->config.vocab_size} * t->config.d_model ==
             m->config.parameter_count());
}

BOOST_AUTO_TEST_CASE(refresh_and_reuse_logits_match_pytorch) {
  for (const char* name : families) {
    auto g = goldens(name);
    auto m = load_model(parity_dir + "/" + name);
    auto be = make_cpu_backend(m);
    const auto& f = g["forward"];
    const canvas c = dls::gpu::test::golden_canvas(f, m->config);
    const step_plan full = dls::gpu::test::full_refresh(c);
    auto cache = be->make_cache();
    float diff = max_diff(be->logits(c, full, *cache), f["logits"].get<std::vector<double>>());
    BOOST_TEST(diff <= 1e-4f, name << " refresh max |diff| " << diff);
    const auto& r = f["reuse"];
    const auto y = dls::gpu::test::golden_reuse_step(r, c);
    diff = max_diff(be->logits(y.c, y.plan, *cache), r["logits"].get<std::vector<double>>());
    BOOST_TEST(diff <= 1e-4f, name << " reuse max |diff| " << diff);
  }
}

BOOST_AUTO_TEST_CASE(decodes_match_pytorch_token_for_token_in_every_cache_mode) {
  for (const char* name : families) {
    auto g = goldens(name);
    auto m = load_model(parity_dir + "/" + name);
    engine e(make_cpu_backend(m));
    int n = 0, reuse_steps = 0;
    for (const auto& d : g["decodes"]) {
      const auto p = dls::gpu::test::golden_decode_params(d);
      auto s = e.admit(canvas::start(d["prompt_ids"].get<std::vector<int32_t>>(), p, m->config.mask_id,
                                     m->config.eos_id));
      while (!s.c.finished) e.step({&s});
      std::string what = std::string(name) + " " + d["label"].get<std::string>() + " cache=" +
                         d["cache"].get<std::string>() + " prompt of " +
                         std::to_string(d["prompt_ids"].size()) + " tokens";
      BOOST_TEST((s.c.answer() == d["answer_ids"].get<std::vector<int32_t>>()), what);
      BOOST_TEST(s.c.steps == d["steps"].get<int64_t>(), what);
      BOOST_TEST(s.c.refresh_steps == d["refresh_steps"].get<int64_t>(), what);
      BOOST_TEST(s.c.reuse_steps == d["reuse_steps"].get<int64_t>(), what);
      reuse_steps += static_cast<int>(s.c.reuse_steps);
      ++n;
    }
    BOOST_TEST(n == 99, name);
    BOOST_TEST(reuse_steps > 0, name << ": the goldens exercise reuse steps");
  }
}

BOOST_AUTO_TEST_CASE(dream_schedule_decodes_match_pytorch_token_for_token_in_every_cache_mode) {
  // maskgit_plus (quota), topk_margin and entropy under Dream's int(masks x (1 - s/t)) counts, some
  // steps committing nothing, with blocks of 8 and with one block of the whole answer (Dream's own).
  for (const char* name : families) {
    auto g = goldens(name);
    auto m = load_model(parity_dir + "/" + name);
    engine e(make_cpu_backend(m));
    int n = 0, differ = 0;
    for (const auto& d : g["schedule_decodes"]) {
      const auto p = dls::gpu::test::golden_decode_params(d);
      BOOST_TEST_REQUIRE((p.schedule == step_schedule::dream_linear));
      const auto prompt = d["prompt_ids"].get<std::vector<int32_t>>();
      auto s = e.admit(canvas::start(prompt, p, m->config.mask_id, m->config.eos_id));
      while (!s.c.finished) e.step({&s});
      std::string what = std::string(name) + " " + d["label"].get<std::string>() + " cache=" +
                         d["cache"].get<std::string>() + " prompt of " + std::to_string(prompt.size()) + " tokens";
      BOOST_TEST((s.c.answer() == d["answer_ids"].get<std::vector<int32_t>>()), what);
      BOOST_TEST(s.c.steps == d["steps"].get<int64_t>(), what);
      BOOST_TEST(s.c.refresh_steps == d["refresh_steps"].get<int64_t>(), what);
      BOOST_TEST(s.c.reuse_steps == d["reuse_steps"].get<int64_t>(), what);
      // The same decode with the even schedule, to show the goldens tell the two apart.
      auto even = p;
      even.schedule = step_schedule::even;
      auto t = e.admit(canvas::start(prompt, even, m->config.mask_id, m->config.eos_id));
      while (!t.c.finished) e.step({&t});
      differ += t.c.answer() != s.c.answer();
      ++n;
    }
    BOOST_TEST(n == 54, name);
    BOOST_TEST(differ > 0, name << ": every schedule decode answers what the even schedule answers");
  }
}

BOOST_AUTO_TEST_CASE(a_dream_reuse_step_computes_the_row_before_its_block) {
  auto m = load_model(parity_dir + "/dream");
  engine e(make_cpu_backend(m));
  decode_params p;
  p.gen_length = 16;
  p.block_length = 8;
  p.rule = commit_rule::quota;
  p.cache = cache_mode::dual;
  auto s = e.admit(canvas::start({3, 4, 5, 6, 7}, p, m->config.mask_id, m->config.eos_id));
  auto first = e.step({&s});
  BOOST_TEST((first[0].kind == step_kind::refresh));
  auto second = e.step({&s});
  BOOST_TEST((second[0].kind == step_kind::reuse));
  BOOST_TEST(second[0].query_rows == 8 + 1);
  // A plan without that row cannot propose the block's first token.
  step_plan bad = s.c.next_step(0);
  std::vector<forward_item> items{{&s.c, bad, s.cache.get()}};
  std::vector<std::vector<row_proposal>> out;
  BOOST_CHECK_THROW(e.device().forward(items, out), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(grouped_query_attention_shrinks_the_kv_cache_and_its_export) {
  auto m = load_model(parity_dir + "/dream");
  auto be = make_cpu_backend(m);
  canvas c = canvas::start({3, 4, 5}, decode_params{}, m->config.mask_id, m->config.eos_id);
  auto cache = be->make_cache();
  (void)be->logits(c, c.next_step(1), *cache);
  const auto& cfg = m->config;
  const std::size_t kv_width = static_cast<std::size_t>(cfg.n_kv_heads) * cfg.head_dim();
  BOOST_TEST(kv_width * 2 == static_cast<std::size_t>(cfg.d_model));
  const std::size_t plane = static_cast<std::size_t>(cfg.n_layers) * c.length() * kv_width * sizeof(float);
  BOOST_TEST(cache->export_bytes().size() == kv_header_bytes + 2 * plane);
  // And it imports into another cache of the same model.
  auto other = be->make_cache();
  other->import_bytes(cache->export_bytes());
  BOOST_TEST(other->export_bytes() == cache->export_bytes());
}

BOOST_AUTO_TEST_CASE(broken_checkpoints_fail_with_one_line_naming_the_file_and_field) {
  {
    copy_of c("dream");
    fs::remove(c.dir() + "/model-00002-of-00003.safetensors");
    auto why = load_failure(c.dir());
    BOOST_TEST(contains(why, "model.safetensors.index.json"), why);
    BOOST_TEST(contains(why, "shard 'model-00002-of-00003.safetensors'"), why);
    BOOST_TEST(!contains(why, "\n"), why);
  }
  {
    copy_of c("dream");
    auto cfg = nlohmann::json::parse(read_text(c.dir() + "/config.json"));
    cfg["num_key_value_heads"] = 4;  // the shards hold 2 KV heads
    write_text(c.dir() + "/config.json", cfg.dump());
    auto why = load_failure(c.dir());
    BOOST_TEST(contains(why, "self_attn.k_proj.weight' has shape [32, 64], expected [64, 64]"), why);
    BOOST_TEST(contains(why, ".safetensors"), why);
  }
  {
    copy_of c("dream");
    auto cfg = nlohmann::json::parse(read_text(c.dir() + "/config.json"));
    cfg["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
    write_text(c.dir() + "/config.json", cfg.dump());
    auto why = load_failure(c.dir());
    BOOST_TEST(contains(why, "config.json: field 'rope_scaling'"), why);
  }
  {
    copy_of c("dream");
    auto cfg = nlohmann::json::parse(read_text(c.dir() + "/config.json"));
    cfg["model_type"] = "qwen2";
    write_text(c.dir() + "/config.json", cfg.dump());
    auto why = load_failure(c.dir());
    BOOST_TEST(contains(why, "field 'model_type' is \"qwen2\""), why);
  }
  {
    copy_of c("llada");
    auto index = nlohmann::json::parse(read_text(c.dir() + "/model.safetensors.index.json"));
    index["weight_map"]["model.transformer.wte.weight"] = "model-00003-of-00003.safetensors";
    write_text(c.dir() + "/model.safetensors.index.json", index.dump());
    auto why = load_failure(c.dir());
    BOOST_TEST(contains(why, "tensor 'model.transformer.wte.weight' is here"), why);
  }
  {
    copy_of t("dream-tied");  // an untied config over shards without lm_head.weight
    auto cfg = nlohmann::json::parse(read_text(t.dir() + "/config.json"));
    cfg["tie_word_embeddings"] = false;
    write_text(t.dir() + "/config.json", cfg.dump());
    auto why = load_failure(t.dir());
    BOOST_TEST(contains(why, "missing tensor 'lm_head.weight'"), why);
  }
}

BOOST_AUTO_TEST_CASE(written_random_checkpoints_shard_and_load_like_published_ones) {
  for (const char* shape : {"llada-8b", "dream-7b"}) {
    model_config cfg = published_shape(shape);
    // The published structure at test widths: Dream keeps its GQA ratio of 7 query heads per KV head.
    cfg.d_model = cfg.arch == architecture::dream ? 112 : 64;
    cfg.n_heads = cfg.arch == architecture::dream ? 14 : 4;
    cfg.n_kv_heads = cfg.arch == architecture::dream ? 2 : 4;
    cfg.mlp_hidden = 96;
    cfg.vocab_size = 512;
    cfg.mask_id = 500;
    cfg.eos_id = 501;
    cfg.n_layers = 2;
    test::temp_dir d;
    const std::string dir = d.path + "/not/yet/there";  // the writer makes the missing parents
    const auto sum = write_random_checkpoint(dir, cfg, 5, 40000);
    BOOST_TEST(sum.shards >= 3, shape);
    auto m = load_model(dir);
    BOOST_TEST((m->config.arch == cfg.arch), shape);
    BOOST_TEST(m->config.n_kv_heads == cfg.n_kv_heads, shape);
    BOOST_TEST(m->config.parameter_count() * 2 == sum.weight_bytes, shape);
    BOOST_TEST(m->head_bf16 != nullptr, shape);
    engine e(make_cpu_backend(m));
    decode_params p;
    p.gen_length = 8;
    p.block_length = 8;
    auto s = e.admit(canvas::start({3, 4, 5, 6}, p, cfg.mask_id, cfg.eos_id));
    while (!s.c.finished) e.step({&s});
    BOOST_TEST(s.c.steps >= 1, shape);
  }
  BOOST_CHECK_THROW(published_shape("llama-70b"), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(dream_over_two_tensor_parallel_ranks_decodes_the_goldens) {
  // Each rank holds one of the two KV heads, its query heads and their slices of the biases.
  auto g = goldens("dream");
  auto m = load_model(parity_dir + "/dream");
  tp_runner two(m, 2);
  int n = 0;
  for (const auto& d : g["decodes"]) {
    if (d["label"] != "tau0.9") continue;
    decode_params p;
    p.gen_length = d["gen_length"];
    p.block_length = d["block_length"];
    p.rule = parse_commit_rule(d["rule"]);
    p.threshold = d["threshold"];
    p.cache = parse_cache_mode(d["cache"]);
    auto h = two.admit(canvas::start(d["prompt_ids"].get<std::vector<int32_t>>(), p, m->config.mask_id,
                                     m->config.eos_id));
    while (!two.view(h).finished) two.step({h});
    BOOST_TEST((two.view(h).answer() == d["answer_ids"].get<std::vector<int32_t>>()), d["cache"].get<std::string>());
    BOOST_TEST((two.view(1, h).ids == two.view(h).ids));
    BOOST_TEST(two.view(h).steps == d["steps"].get<int64_t>());
    ++n;
  }
  BOOST_TEST(n == 9);
}

BOOST_AUTO_TEST_CASE(dream_rules_travel_with_the_canvas_and_parse_by_name) {
  for (auto rule : {commit_rule::margin, commit_rule::entropy}) {
    decode_params p;
    p.rule = rule;
    p.steps_per_block = 4;
    auto c = canvas::start({3, 4, 5}, p, 252, 248);
    BOOST_TEST((canvas::from_bytes(c.to_bytes()).params.rule == rule));
    BOOST_TEST((parse_commit_rule(to_string(rule)) == rule));
  }
  auto bytes = canvas::start({3}, decode_params{}, 252, 248).to_bytes();
  bytes[4 + 4 + 4 * 5] = 9;  // the rule byte: after magic, version, prompt_len, mask, EOS, gen and block lengths
  BOOST_CHECK_THROW(canvas::from_bytes(bytes), std::invalid_argument);
}
