#define BOOST_TEST_MODULE gpu_loader
#include "test_support.hpp"

#include "gpu/dtype.hpp"
#include "gpu/finite_scan.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

using namespace dls::gpu;
using dls::gpu::test::temp_dir;

namespace {

std::string message_of(const std::string& dir) {
  try {
    load_model(dir);
  } catch (const load_error& e) {
    return e.what();
  }
  return "(loaded)";
}

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_all(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(f32_bf16_f16_checkpoints_load_with_the_right_values) {
  auto ref = make_random_model(test::small_config(), 7);
  for (auto t : {dtype::f32, dtype::bf16, dtype::f16}) {
    temp_dir d;
    test::write_checkpoint(d.path, *ref, t);
    auto m = load_model(d.path);
    BOOST_TEST(m->config.d_model == 32);
    float tol = t == dtype::f32 ? 0.0f : (t == dtype::bf16 ? 1e-2f : 1e-3f);
    // bf16 matrices stay bf16 in the mapping (no f32 copy); f16 ones are converted.
    BOOST_TEST((m->layers[1].q_proj == nullptr) == (t == dtype::bf16));
    BOOST_TEST((m->head_bf16 != nullptr) == (t == dtype::bf16));
    for (int i = 0; i < 32 * 32; ++i) {
      float a = ref->layers[1].q_proj[i];
      float b = t == dtype::bf16 ? bf16_to_f32(m->layers[1].bf16.q_proj[i]) : m->layers[1].q_proj[i];
      BOOST_TEST(std::fabs(a - b) <= tol * std::max(1.0f, std::fabs(a)));
    }
    if (t == dtype::f32) BOOST_TEST(m->head[5] == ref->head[5]);
  }
}

BOOST_AUTO_TEST_CASE(half_precision_conversions_round_trip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 1e-6f, 3.14159f}) {
    BOOST_TEST(std::fabs(f16_to_f32(f32_to_f16(v)) - v) <= std::fabs(v) * 1e-3f + 1e-7f);
    BOOST_TEST(std::fabs(bf16_to_f32(f32_to_bf16(v)) - v) <= std::fabs(v) * 8e-3f);
  }
}

BOOST_AUTO_TEST_CASE(truncated_file_names_the_tensor_and_offset) {
  temp_dir d;
  test::write_checkpoint(d.path, *make_random_model(test::small_config(), 1));
  auto bytes = read_all(d.path + "/model.safetensors");
  write_all(d.path + "/model.safetensors", bytes.substr(0, bytes.size() - 100));
  auto msg = message_of(d.path);
  BOOST_TEST(contains(msg, "truncated"), msg);
  BOOST_TEST(contains(msg, "model.transformer.ff_out.weight"), msg);
  write_all(d.path + "/model.safetensors", bytes.substr(0, 5));
  BOOST_TEST(contains(message_of(d.path), "header length"));
}

BOOST_AUTO_TEST_CASE(bad_header_is_refused) {
  temp_dir d;
  test::write_checkpoint(d.path, *make_random_model(test::small_config(), 1));
  auto bytes = read_all(d.path + "/model.safetensors");
  auto broken = bytes;
  broken[8] = '#';  // JSON no longer parses
  write_all(d.path + "/model.safetensors", broken);
  BOOST_TEST(contains(message_of(d.path), "bad header"));
  broken = bytes;
  uint64_t huge = uint64_t(1) << 40;
  std::memcpy(broken.data(), &huge, 8);
  write_all(d.path + "/model.safetensors", broken);
  BOOST_TEST(contains(message_of(d.path), "exceeds the file size"));
  broken = bytes;
  auto pos = broken.find("\"F32\"");
  broken.replace(pos, 5, "\"I64\"");
  write_all(d.path + "/model.safetensors", broken);
  BOOST_TEST(contains(message_of(d.path), "unsupported dtype 'I64'"));
}

BOOST_AUTO_TEST_CASE(missing_tensor_and_wrong_shape_name_the_tensor) {
  auto cfg = test::small_config();
  auto m = make_random_model(cfg, 1);
  {
    temp_dir d;
    auto shapes = llada_tensor_shapes(cfg);
    std::vector<const float*> ptrs(shapes.size(), m->wte);  // values are irrelevant here
    std::vector<float> big(1 << 16, 0.0f);
    for (auto& p : ptrs) p = big.data();
    shapes.erase(shapes.begin() + 3);  // blocks.0.k_proj
    ptrs.pop_back();
    test::write_config(d.path, cfg);
    write_safetensors_f32(d.path + "/model.safetensors", shapes, ptrs);
    auto msg = message_of(d.path);
    BOOST_TEST(contains(msg, "missing tensor 'model.transformer.blocks.0.k_proj.weight'"), msg);
  }
  {
    temp_dir d;
    test::write_checkpoint(d.path, *m);
    auto c2 = cfg;
    c2.mlp_hidden = 96;  // config disagrees with the tensors
    test::write_config(d.path, c2);
    auto msg = message_of(d.path);
    BOOST_TEST(contains(msg, "model.transformer.blocks.0.ff_proj.weight' has shape [64, 32], expected [96, 32]"), msg);
  }
}

BOOST_AUTO_TEST_CASE(config_problems_are_one_line_errors) {
  temp_dir d;
  BOOST_TEST(contains(message_of(d.path), "cannot open config.json"));
  {
    std::ofstream f(d.path + "/config.json");
    f << "{\"d_model\": 32, \"n_layers\": 2}";
  }
  BOOST_TEST(contains(message_of(d.path), "missing field 'n_heads'"));
  {
    std::ofstream f(d.path + "/config.json");
    f << "{\"d_model\": \"wide\"";
  }
  BOOST_TEST(contains(message_of(d.path), "not valid JSON"));
  test::write_config(d.path, test::small_config(), ", \"weight_tying\": true");
  BOOST_TEST(contains(message_of(d.path), "weight_tying"));
  test::write_config(d.path, test::small_config());
  BOOST_TEST(contains(message_of(d.path), "no *.safetensors"));
}

// Found by fuzz_model_config: a number too large for an int field was converted anyway (undefined
// behaviour); out-of-range values and absurd shapes are now refused by name.
BOOST_AUTO_TEST_CASE(config_numbers_out_of_range_are_refused) {
  const std::string base = R"({"d_model": 128, "n_layers": 4, "n_heads": 4, "vocab_size": 47, "mask_token_id": 1,
                               "eos_token_id": 0)";
  auto msg = [&](const std::string& extra) {
    try {
      parse_model_config(base + extra + "}", "c.json");
    } catch (const load_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  BOOST_TEST(contains(msg(R"(, "n_kv_heads": 8e100)"), "field 'n_kv_heads' must be an integer in"));
  BOOST_TEST(contains(msg(R"(, "n_kv_heads": 4294967297)"), "field 'n_kv_heads' must be an integer in"));
  BOOST_TEST(contains(msg(R"(, "rope_theta": 1e300)"), "field 'rope_theta' is out of range"));
  BOOST_TEST(contains(msg(R"(, "mlp_ratio": 1e300)"), "mlp_ratio x d_model"));
  BOOST_TEST(contains(msg(R"(, "n_layers": 2000000000, "mlp_hidden_size": 2000000000)"), "weights, over the limit"));
  BOOST_TEST(msg(R"(, "n_kv_heads": 2.0, "mlp_ratio": 2.75)").empty());
  BOOST_TEST(parse_model_config(base + R"(, "mlp_ratio": 2.75})", "c.json").mlp_hidden == 352);
}

BOOST_AUTO_TEST_CASE(char_tokenizer_round_trips_and_unsupported_hf_models_are_refused_clearly) {
  temp_dir d;
  {
    std::ofstream f(d.path + "/tokenizer.json");
    f << R"({"type": "char", "vocab": ["<eos>", "<mask>", "a", "b", "=", "<unk>"], "eos_id": 0, "mask_id": 1, "unk_id": 5})";
  }
  auto t = load_tokenizer(d.path);
  auto ids = t->encode("ab=z");
  BOOST_TEST((ids == std::vector<int32_t>{2, 3, 4, 5}));
  BOOST_TEST(t->decode({2, 3, 0, 2}) == "ab");
  {
    std::ofstream f(d.path + "/tokenizer.json");
    f << R"({"model": {"type": "WordPiece"}})";
  }
  try {
    load_tokenizer(d.path);
    BOOST_FAIL("WordPiece tokenizer accepted");
  } catch (const load_error& e) {
    BOOST_TEST(contains(e.what(), "WordPiece"));
  }
}

// A corrupted copy of the shipped checkpoint: one weight overwritten in place.
BOOST_AUTO_TEST_CASE(nan_and_inf_weights_are_refused_naming_the_tensor) {
  const std::string shipped = std::string(DLS_SOURCE_DIR) + "/models/tiny-llada";
  const std::string victim = "model.transformer.blocks.1.ff_out.weight";
  for (float bad : {std::nanf(""), -INFINITY}) {
    temp_dir d;
    for (auto f : {"config.json", "tokenizer.json", "model.safetensors"})
      std::filesystem::copy_file(shipped + "/" + f, d.path + "/" + f);
    std::size_t offset = 0;
    {
      safetensors_file st(d.path + "/model.safetensors");
      const auto& v = st.tensors().at(victim);
      BOOST_REQUIRE(v.type == dtype::f32);
      offset = v.file_offset + 17 * sizeof(float);
    }
    BOOST_TEST(message_of(d.path) == "(loaded)");  // the intact copy loads
    auto bytes = read_all(d.path + "/model.safetensors");
    std::memcpy(bytes.data() + offset, &bad, sizeof bad);
    write_all(d.path + "/model.safetensors", bytes);
    auto msg = message_of(d.path);
    BOOST_TEST(contains(msg, "tensor '" + victim + "' holds " + (std::isnan(bad) ? "NaN" : "Inf") + " at element 17"),
               msg);
    BOOST_TEST(contains(msg, "corrupt"), msg);
  }
}

BOOST_AUTO_TEST_CASE(finite_scan_finds_the_first_bad_value_anywhere) {
  std::vector<float> v(10000, 0.5f);
  BOOST_TEST(first_non_finite(v.data(), v.size()) == -1);
  BOOST_TEST(first_non_finite(v.data(), 0) == -1);
  for (std::size_t at : {std::size_t{0}, std::size_t{4095}, std::size_t{4096}, std::size_t{9999}}) {
    auto w = v;
    w[at] = INFINITY;
    w[9999] = std::nanf("");
    BOOST_TEST(first_non_finite(w.data(), w.size()) == static_cast<int64_t>(at));
  }
  v[3] = 3.4e38f;  // the largest finite values are not mistaken for Inf
  v[4] = -3.4e38f;
  BOOST_TEST(first_non_finite(v.data(), v.size()) == -1);
}
