#pragma once
// The values a chat template computes with, with Python's (Jinja's) semantics: undefined, none,
// booleans, integers, strings, lists and dicts. Dicts keep insertion order, like Python's; a
// namespace() is a dict shared by reference so that `set ns.x = ...` is seen outside a loop.
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dls::gpu::jinja {

/// A template that uses something this renderer does not implement, or fails while rendering;
/// what() is one line naming it.
struct template_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct value;
using list = std::vector<value>;
using dict = std::vector<std::pair<std::string, value>>;

struct value {
  enum class kind { undefined, none, boolean, integer, string, list, dict };
  kind k = kind::undefined;
  bool b = false;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<list> l;
  std::shared_ptr<dict> d;
  std::string undefined_name;  // for error messages

  static value undefined(std::string name = {}) {
    value v;
    v.undefined_name = std::move(name);
    return v;
  }
  static value none() { return with(kind::none); }
  static value boolean(bool x) {
    value v = with(kind::boolean);
    v.b = x;
    return v;
  }
  static value integer(int64_t x) {
    value v = with(kind::integer);
    v.i = x;
    return v;
  }
  static value string(std::string x) {
    value v = with(kind::string);
    v.s = std::move(x);
    return v;
  }
  static value make_list(list x = {}) {
    value v = with(kind::list);
    v.l = std::make_shared<list>(std::move(x));
    return v;
  }
  static value make_dict(dict x = {}) {
    value v = with(kind::dict);
    v.d = std::make_shared<dict>(std::move(x));
    return v;
  }
  static value from_json(const nlohmann::ordered_json& j);

  bool is(kind x) const { return k == x; }
  bool truthy() const;
  /// The entry `key` of a dict, or nullptr.
  const value* find(const std::string& key) const;
  void set(const std::string& key, value v);
  const char* type_name() const;

 private:
  static value with(kind x) {
    value v;
    v.k = x;
    return v;
  }
};

/// Python's str() of a value, as `{{ x }}` prints it.
std::string to_output(const value& v);
/// Python's ==.
bool equal(const value& a, const value& b);
/// json.dumps(v, ensure_ascii=False, indent=indent) as Hugging Face's tojson filter writes it
/// (indent < 0: none).
std::string to_json_text(const value& v, int indent);

}  // namespace dls::gpu::jinja
