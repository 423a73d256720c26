#include "gpu/chat_template.hpp"

#include "gpu/safetensors.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

namespace dls::gpu {

using jinja::expr;
using jinja::node;
using jinja::template_error;
using jinja::value;
using K = value::kind;

namespace {

[[noreturn]] void fail(const std::string& what) { throw template_error("chat template: " + what); }

// A template's loops run over messages; a range() this long is a corrupt template, not a chat.
constexpr int64_t max_range = 1'000'000;

// How deep a value a template may build (lists in lists, namespaces in namespaces): as deep as the
// parser lets an expression nest, far deeper than a chat's data, and shallow enough for the
// recursive printing, comparison and destruction of values.
constexpr std::size_t max_value_depth = 100;

// A tojson indent wider than this many spaces is a corrupt template (Hugging Face's use 2 or 4).
constexpr int64_t max_json_indent = 64;

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

// ---- Python string helpers (strings are UTF-8; Python indexes code points) ----

std::vector<UChar32> code_points(const std::string& s) {
  std::vector<UChar32> out;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const int32_t n = static_cast<int32_t>(s.size());
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT_OR_FFFD(p, i, n, c);
    out.push_back(c);
  }
  return out;
}

std::string from_code_points(const std::vector<UChar32>& cps, std::size_t b, std::size_t e) {
  std::string out;
  for (std::size_t i = b; i < e; ++i) {
    uint8_t buf[4];
    int32_t len = 0;
    U8_APPEND_UNSAFE(buf, len, cps[i]);  // code points come from U8_NEXT_OR_FFFD, so all valid
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(len));
  }
  return out;
}

// Python's str.isspace(): bidirectional class WS, B or S, or general category Zs.
bool python_space(UChar32 c) {
  const auto dir = u_charDirection(c);
  return u_charType(c) == U_SPACE_SEPARATOR || dir == U_WHITE_SPACE_NEUTRAL || dir == U_BLOCK_SEPARATOR ||
         dir == U_SEGMENT_SEPARATOR;
}

std::string python_strip(const std::string& s, const value* chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<UChar32> set;
  const bool by_set = chars && !chars->is(K::none) && !chars->is(K::undefined);
  if (by_set) {
    if (!chars->is(K::string)) fail("strip() takes a string");
    set = code_points(chars->s);
  }
  auto strip_this = [&](UChar32 c) { return by_set ? std::find(set.begin(), set.end(), c) != set.end() : python_space(c); };
  std::size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_this(cps[b])) ++b;
  if (right)
    while (e > b && strip_this(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

value python_split(const std::string& s, const value* sep, int64_t maxsplit) {
  value out = value::make_list();
  if (!sep || sep->is(K::none)) {  // runs of whitespace, no empty strings
    const auto cps = code_points(s);
    std::size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && python_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      std::size_t j = i;
      if (maxsplit >= 0 && static_cast<int64_t>(out.l->size()) == maxsplit) {
        std::size_t e = cps.size();
        while (e > i && python_space(cps[e - 1])) --e;
        out.l->push_back(value::string(from_code_points(cps, i, e)));
        break;
      }
      while (j < cps.size() && !python_space(cps[j])) ++j;
      out.l->push_back(value::string(from_code_points(cps, i, j)));
      i = j;
    }
    return out;
  }
  if (!sep->is(K::string)) fail("split() takes a string separator");
  if (sep->s.empty()) fail("split() with an empty separator");
  std::size_t from = 0;
  for (;;) {
    const std::size_t at = (maxsplit >= 0 && static_cast<int64_t>(out.l->size()) >= maxsplit) ? std::string::npos
                                                                                              : s.find(sep->s, from);
    if (at == std::string::npos) {
      out.l->push_back(value::string(s.substr(from)));
      return out;
    }
    out.l->push_back(value::string(s.substr(from, at - from)));
    from = at + sep->s.size();
  }
}

std::string case_map(const std::string& s, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (upper) u.toUpper(); else u.toLower();
  std::string out;
  u.toUTF8String(out);
  return out;
}

int64_t length_of(const value& v) {
  switch (v.k) {
    case K::string: return static_cast<int64_t>(code_points(v.s).size());
    case K::list: return static_cast<int64_t>(v.l->size());
    case K::dict: return static_cast<int64_t>(v.d->size());
    case K::undefined: return 0;
    default: fail(std::string("length of a ") + v.type_name());
  }
}

// Python's slice semantics for a sequence of length n.
std::vector<std::size_t> slice_indices(int64_t n, const value& start, const value& stop, const value& step) {
  auto opt = [](const value& v, const char* what) -> std::optional<int64_t> {
    if (v.is(K::undefined) || v.is(K::none)) return std::nullopt;
    if (!v.is(K::integer)) fail(std::string("slice ") + what + " must be an integer");
    return v.i;
  };
  const int64_t st = opt(step, "step").value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t v = *x < 0 ? *x + n : *x;
    if (st > 0) return std::clamp<int64_t>(v, 0, n);
    return std::clamp<int64_t>(v, -1, n - 1);
  };
  const int64_t b = clamp(opt(start, "start"), st > 0 ? 0 : n - 1);
  const int64_t e = clamp(opt(stop, "stop"), st > 0 ? n : -1);
  std::vector<std::size_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(static_cast<std::size_t>(i));
  return out;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) fail("integer division by zero");
  if (a == INT64_MIN && b == -1) fail("integer overflow in '//'");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// ---- the interpreter ----

class renderer {
 public:
  renderer(std::map<std::string, value> globals, uint64_t work_limit) : work_limit_(work_limit), work_left_(work_limit) {
    scopes_.push_back(std::move(globals));
  }

  void run(const std::vector<node>& nodes, std::string& out) {
    for (const auto& n : nodes) exec(n, out);
  }

 private:
  // Every step and every byte or element an operation touches is charged before the work is
  // done, so a template that would loop or grow without end fails here instead.
  void charge(uint64_t units) {
    if (units > work_left_)
      fail("rendering this conversation needs more than its budget of " + std::to_string(work_limit_) +
           " work units (a loop or a value that grows without end?)");
    work_left_ -= units;
  }

  struct extent {
    uint64_t units = 0;  // one per value, one per byte of its strings and keys
    std::size_t depth = 0;
  };
  // Walks `v` (stopping once past the work left, which the caller then fails to charge), and
  // refuses a value deeper than max_value_depth or one that holds the dict `self`: a namespace
  // set to contain itself would be a reference cycle, leaked and printed without end.
  extent measure(const value& v, const jinja::dict* self = nullptr) const {
    extent e;
    measure_into(v, self, 0, e);
    return e;
  }
  void measure_into(const value& v, const jinja::dict* self, std::size_t depth, extent& e) const {
    if (depth > max_value_depth) fail("a value nested deeper than " + std::to_string(max_value_depth) + " levels");
    e.depth = std::max(e.depth, depth);
    e.units += 1 + v.s.size();
    if (e.units > work_left_) return;
    if (v.is(K::list)) {
      for (const auto& x : *v.l) {
        measure_into(x, self, depth + 1, e);
        if (e.units > work_left_) return;
      }
    } else if (v.is(K::dict)) {
      if (self && v.d.get() == self) fail("a namespace cannot contain itself");
      for (const auto& [k, x] : *v.d) {
        e.units += k.size();
        measure_into(x, self, depth + 1, e);
        if (e.units > work_left_) return;
      }
    }
  }

  struct args_t {
    std::vector<value> positional;
    std::map<std::string, value> keyword;
    const value* get(std::size_t i, const char* name) const {
      if (i < positional.size()) return &positional[i];
      auto it = keyword.find(name);
      return it == keyword.end() ? nullptr : &it->second;
    }
  };

  void exec(const node& n, std::string& out) {
    charge(1);
    switch (n.k) {
      case node::kind::text:
        charge(n.text.size());
        out += n.text;
        return;
      case node::kind::output: {
        const std::string s = jinja::to_output(eval(*n.e));
        charge(s.size());
        out += s;
        return;
      }
      case node::kind::if_:
        run(eval(*n.e).truthy() ? n.body : n.orelse, out);
        return;
      case node::kind::set: {
        value v = eval(*n.e);
        if (n.targets.size() == 1) {
          charge(measure(v).units);
          scopes_.back()[n.targets[0]] = std::move(v);
          return;
        }
        value ns = lookup(n.targets[0]);
        if (!ns.is(K::dict)) fail("'" + n.targets[0] + "' is not a namespace, so its attributes cannot be set");
        charge(measure(v, ns.d.get()).units);
        ns.set(n.targets[1], std::move(v));
        return;
      }
      case node::kind::for_: {
        value seq = eval(*n.e);
        std::vector<value> items;
        if (seq.is(K::list) || seq.is(K::dict)) charge(seq.is(K::list) ? seq.l->size() : seq.d->size());
        if (seq.is(K::list)) items = *seq.l;
        else if (seq.is(K::dict))
          for (const auto& [k, v] : *seq.d) items.push_back(value::string(k));
        else if (!seq.is(K::undefined))
          fail(std::string("iterating over a ") + seq.type_name() + " is not supported");
        const auto count = static_cast<int64_t>(items.size());
        for (int64_t i = 0; i < count; ++i) {
          std::map<std::string, value> scope;
          if (n.targets.size() == 1) {
            scope[n.targets[0]] = items[static_cast<std::size_t>(i)];
          } else {
            const value& it = items[static_cast<std::size_t>(i)];
            if (!it.is(K::list) || it.l->size() != n.targets.size()) fail("cannot unpack a loop item");
            for (std::size_t t = 0; t < n.targets.size(); ++t) scope[n.targets[t]] = (*it.l)[t];
          }
          value loop = value::make_dict();
          loop.set("index", value::integer(i + 1));
          loop.set("index0", value::integer(i));
          loop.set("revindex", value::integer(count - i));
          loop.set("revindex0", value::integer(count - i - 1));
          loop.set("first", value::boolean(i == 0));
          loop.set("last", value::boolean(i == count - 1));
          loop.set("length", value::integer(count));
          scope["loop"] = loop;
          scopes_.push_back(std::move(scope));
          run(n.body, out);
          scopes_.pop_back();
        }
        return;
      }
    }
  }

  value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return value::undefined(name);
  }

  static void need_defined(const value& v, const std::string& what) {
    if (v.is(K::undefined))
      fail("'" + (v.undefined_name.empty() ? std::string("value") : v.undefined_name) + "' is undefined (" + what + ")");
  }

  args_t eval_args(const expr& e, std::size_t first) {
    args_t a;
    for (std::size_t i = first; i < e.args.size(); ++i) {
      if (e.keywords[i].empty()) a.positional.push_back(eval(*e.args[i]));
      else a.keyword[e.keywords[i]] = eval(*e.args[i]);
    }
    return a;
  }

  value eval(const expr& e) {
    charge(1);
    switch (e.k) {
      case expr::kind::literal: return e.literal;
      case expr::kind::name: return lookup(e.name);
      case expr::kind::list: {
        value l = value::make_list();
        for (const auto& a : e.args) l.l->push_back(eval(*a));
        return l;
      }
      case expr::kind::dict: {
        value d = value::make_dict();
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
          value k = eval(*e.args[i]);
          if (!k.is(K::string)) fail("dict keys must be strings");
          d.set(k.s, eval(*e.args[i + 1]));
        }
        return d;
      }
      case expr::kind::member: {
        value obj = eval(*e.args[0]);
        need_defined(obj, "reading ." + e.name);
        if (const value* v = obj.find(e.name)) return *v;
        return value::undefined(e.name);
      }
      case expr::kind::index: {
        value obj = eval(*e.args[0]);
        value key = eval(*e.args[1]);
        need_defined(obj, "subscript");
        if (obj.is(K::dict)) {
          if (!key.is(K::string)) return value::undefined();
          const value* v = obj.find(key.s);
          return v ? *v : value::undefined(key.s);
        }
        if (!key.is(K::integer)) fail(std::string("a ") + obj.type_name() + " index must be an integer");
        if (obj.is(K::list)) {
          const auto n = static_cast<int64_t>(obj.l->size());
          const int64_t i = key.i < 0 ? key.i + n : key.i;
          return i >= 0 && i < n ? (*obj.l)[static_cast<std::size_t>(i)] : value::undefined();
        }
        if (obj.is(K::string)) {
          charge(obj.s.size());
          const auto cps = code_points(obj.s);
          const auto n = static_cast<int64_t>(cps.size());
          const int64_t i = key.i < 0 ? key.i + n : key.i;
          if (i < 0 || i >= n) return value::undefined();
          return value::string(from_code_points(cps, static_cast<std::size_t>(i), static_cast<std::size_t>(i) + 1));
        }
        fail(std::string("indexing a ") + obj.type_name());
      }
      case expr::kind::slice: {
        value obj = eval(*e.args[0]);
        value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.args[static_cast<std::size_t>(i) + 1]) parts[i] = eval(*e.args[static_cast<std::size_t>(i) + 1]);
        if (obj.is(K::list)) {
          charge(obj.l->size());
          value out = value::make_list();
          for (auto i : slice_indices(static_cast<int64_t>(obj.l->size()), parts[0], parts[1], parts[2]))
            out.l->push_back((*obj.l)[i]);
          return out;
        }
        if (obj.is(K::string)) {
          charge(obj.s.size());
          const auto cps = code_points(obj.s);
          std::vector<UChar32> picked;
          for (auto i : slice_indices(static_cast<int64_t>(cps.size()), parts[0], parts[1], parts[2])) picked.push_back(cps[i]);
          return value::string(from_code_points(picked, 0, picked.size()));
        }
        fail(std::string("slicing a ") + obj.type_name());
      }
      case expr::kind::call: return call(e);
      case expr::kind::filter: return filter(e);
      case expr::kind::test: {
        const bool r = test(e.name, eval(*e.args[0]));
        return value::boolean(e.negated ? !r : r);
      }
      case expr::kind::unary: {
        value v = eval(*e.args[0]);
        if (e.name == "not") return value::boolean(!v.truthy());
        if (!v.is(K::integer)) fail("unary " + e.name + " on a " + v.type_name());
        if (e.name == "-" && v.i == INT64_MIN) fail("integer overflow in unary '-'");
        return value::integer(e.name == "-" ? -v.i : v.i);
      }
      case expr::kind::conditional: return eval(*e.args[0]).truthy() ? eval(*e.args[1]) : eval(*e.args[2]);
      case expr::kind::binary: return binary(e);
    }
    fail("unknown expression");
  }

  value binary(const expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      value a = eval(*e.args[0]);
      return a.truthy() ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      value a = eval(*e.args[0]);
      return a.truthy() ? a : eval(*e.args[1]);
    }
    value a = eval(*e.args[0]);
    value b = eval(*e.args[1]);
    if (op == "==" || op == "!=") {
      charge(measure(a).units);
      charge(measure(b).units);
      return value::boolean(jinja::equal(a, b) == (op == "=="));
    }
    if (op == "~") {
      std::string x = jinja::to_output(a);
      const std::string y = jinja::to_output(b);
      charge(x.size() + y.size());
      return value::string(std::move(x) + y);
    }
    if (op == "in" || op == "not in") {
      bool r;
      if (b.is(K::string)) {
        if (!a.is(K::string)) fail("'in <string>' needs a string on the left");
        charge(saturating_mul(a.s.size() + 1, b.s.size() + 1));  // the worst case of a naive search
        r = b.s.find(a.s) != std::string::npos;
      } else if (b.is(K::list)) {
        charge(measure(b).units);
        charge(saturating_mul(measure(a).units, b.l->size()));
        r = std::any_of(b.l->begin(), b.l->end(), [&](const value& x) { return jinja::equal(a, x); });
      } else if (b.is(K::dict)) {
        charge(b.d->size());
        r = a.is(K::string) && b.find(a.s) != nullptr;
      } else {
        fail(std::string("'in' on a ") + b.type_name());
      }
      return value::boolean(op == "in" ? r : !r);
    }
    auto as_int = [](const value& v, bool& ok) {
      ok = v.is(K::integer) || v.is(K::boolean);
      return v.is(K::integer) ? v.i : static_cast<int64_t>(v.b);
    };
    bool ai, bi;
    const int64_t x = as_int(a, ai), y = as_int(b, bi);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (ai && bi) {
        c = x < y ? -1 : (x > y ? 1 : 0);
      } else if (a.is(K::string) && b.is(K::string)) {
        charge(std::min(a.s.size(), b.s.size()));
        c = a.s.compare(b.s) < 0 ? -1 : (a.s == b.s ? 0 : 1);
      } else {
        fail(std::string("comparing a ") + a.type_name() + " with a " + b.type_name());
      }
      if (op == "<") return value::boolean(c < 0);
      if (op == ">") return value::boolean(c > 0);
      if (op == "<=") return value::boolean(c <= 0);
      return value::boolean(c >= 0);
    }
    int64_t r = 0;
    // Arguments are evaluated in no fixed order, so `r` is read here, after the builtin wrote it.
    auto checked = [&](bool overflow) {
      if (overflow) fail("integer overflow in '" + op + "'");
      return value::integer(r);
    };
    if (op == "+") {
      if (ai && bi) return checked(__builtin_add_overflow(x, y, &r));
      if (a.is(K::string) && b.is(K::string)) {
        charge(a.s.size() + b.s.size());
        return value::string(a.s + b.s);
      }
      if (a.is(K::list) && b.is(K::list)) {
        charge(a.l->size() + b.l->size());
        value l = value::make_list(*a.l);
        l.l->insert(l.l->end(), b.l->begin(), b.l->end());
        return l;
      }
      fail(std::string("'+' on a ") + a.type_name() + " and a " + b.type_name());
    }
    if (!(ai && bi)) fail("'" + op + "' on a " + a.type_name() + " and a " + b.type_name());
    if (op == "-") return checked(__builtin_sub_overflow(x, y, &r));
    if (op == "*") return checked(__builtin_mul_overflow(x, y, &r));
    if (op == "//") return value::integer(floor_div(x, y));
    if (op == "%") return value::integer(x - floor_div(x, y) * y);
    fail("operator '" + op + "' is not supported");
  }

  value call(const expr& e) {
    const expr& callee = *e.args[0];
    args_t a = eval_args(e, 1);
    if (callee.k == expr::kind::name) {
      if (callee.name == "namespace") {
        if (!a.positional.empty()) fail("namespace() takes keyword arguments only");
        value ns = value::make_dict();
        for (auto& [k, v] : a.keyword) ns.set(k, v);
        return ns;
      }
      if (callee.name == "raise_exception") {
        const value* m = a.get(0, "message");
        fail("the template raised: " + (m ? jinja::to_output(*m) : std::string()));
      }
      if (callee.name == "range") {
        if (a.positional.empty() || a.positional.size() > 2) fail("range() takes one or two integers");
        for (const auto& p : a.positional)
          if (!p.is(K::integer)) fail("range() takes integers");
        const int64_t b = a.positional.size() == 2 ? a.positional[0].i : 0;
        const int64_t end = a.positional.back().i;
        if (end > b && static_cast<uint64_t>(end) - static_cast<uint64_t>(b) > static_cast<uint64_t>(max_range)) fail("range() of more than " + std::to_string(max_range) + " numbers");
        if (end > b) charge(static_cast<uint64_t>(end) - static_cast<uint64_t>(b));
        value l = value::make_list();
        for (int64_t i = b; i < end; ++i) l.l->push_back(value::integer(i));
        return l;
      }
      fail("function '" + callee.name + "' is not supported");
    }
    if (callee.k != expr::kind::member) fail("only functions and methods can be called");
    value obj = eval(*callee.args[0]);
    need_defined(obj, "calling ." + callee.name + "()");
    return method(obj, callee.name, a);
  }

  value method(const value& obj, const std::string& name, const args_t& a) {
    if (obj.is(K::string)) {
      const std::string& s = obj.s;
      if (name == "startswith" || name == "endswith") {
        const value* p = a.get(0, "prefix");
        if (!p) fail(name + "() needs an argument");
        std::vector<std::string> options;
        if (p->is(K::string)) options.push_back(p->s);
        else if (p->is(K::list))
          for (const auto& x : *p->l) options.push_back(x.is(K::string) ? x.s : fail_str(name));
        else fail(name + "() takes a string");
        for (const auto& o : options) {
          charge(o.size() + 1);
          if (o.size() > s.size()) continue;
          if (name == "startswith" ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0)
            return value::boolean(true);
        }
        return value::boolean(false);
      }
      // Each other string method reads `s` once per character of its argument at worst.
      const value* arg0 = a.get(0, name == "replace" ? "old" : (name == "split" ? "sep" : "chars"));
      charge(saturating_mul(s.size() + 1, arg0 && arg0->is(K::string) ? arg0->s.size() + 1 : 1));
      if (name == "strip" || name == "lstrip" || name == "rstrip")
        return value::string(python_strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip"));
      if (name == "split") {
        const value* m = a.get(1, "maxsplit");
        if (m && !m->is(K::integer)) fail("split() maxsplit must be an integer");
        return python_split(s, a.get(0, "sep"), m ? m->i : -1);
      }
      if (name == "lower" || name == "upper") return value::string(case_map(s, name == "upper"));
      if (name == "replace") {
        const value* o = a.get(0, "old");
        const value* n = a.get(1, "new");
        if (!o || !n || !o->is(K::string) || !n->is(K::string)) fail("replace() takes two strings");
        if (o->s.empty()) fail("replace() of an empty string is not supported");
        std::string out;
        std::size_t from = 0;
        for (std::size_t at; (at = s.find(o->s, from)) != std::string::npos; from = at + o->s.size()) {
          charge(at - from + n->s.size());
          out += s.substr(from, at - from) + n->s;
        }
        return value::string(out + s.substr(from));
      }
    } else if (obj.is(K::dict)) {
      if (name == "get") {
        const value* k = a.get(0, "key");
        if (!k || !k->is(K::string)) fail("get() takes a string key");
        if (const value* v = obj.find(k->s)) return *v;
        const value* d = a.get(1, "default");
        return d ? *d : value::none();
      }
      if (name == "items" || name == "keys" || name == "values") {
        charge(obj.d->size());
        value l = value::make_list();
        for (const auto& [k, v] : *obj.d) {
          if (name == "items") l.l->push_back(value::make_list({value::string(k), v}));
          else l.l->push_back(name == "keys" ? value::string(k) : v);
        }
        return l;
      }
    }
    fail(std::string("method '") + name + "' of a " + obj.type_name() + " is not supported");
  }
  [[noreturn]] static std::string fail_str(const std::string& name) { fail(name + "() takes strings"); }

  value filter(const expr& e) {
    value v = eval(*e.args[0]);
    args_t a = eval_args(e, 1);
    const std::string& f = e.name;
    if (f == "trim") {
      need_defined(v, "|trim");
      const std::string s = jinja::to_output(v);
      const value* chars = a.get(0, "chars");
      charge(saturating_mul(s.size() + 1, chars && chars->is(K::string) ? chars->s.size() + 1 : 1));
      return value::string(python_strip(s, chars, true, true));
    }
    if (f == "length" || f == "count") {
      charge(v.s.size());
      return value::integer(length_of(v));
    }
    if (f == "string" || f == "lower" || f == "upper") {
      std::string s = jinja::to_output(v);
      charge(s.size());
      return value::string(f == "string" ? std::move(s) : case_map(s, f == "upper"));
    }
    if (f == "tojson") {
      const value* ind = a.get(0, "indent");
      if (ind && !ind->is(K::integer) && !ind->is(K::none)) fail("tojson indent must be an integer");
      if (ind && ind->is(K::integer) && (ind->i < 0 || ind->i > max_json_indent))
        fail("tojson indent must be between 0 and " + std::to_string(max_json_indent));
      for (const auto& [k, x] : a.keyword)
        if (k != "indent") fail("tojson argument '" + k + "' is not supported");
      const int indent = ind && ind->is(K::integer) ? static_cast<int>(ind->i) : -1;
      // The text is at most 6 bytes per byte (\u00XX escapes), plus a line of indent per value.
      const extent x = measure(v);
      charge(saturating_mul(x.units, 6 + static_cast<uint64_t>(std::max(indent, 0)) * (x.depth + 1)));
      return value::string(jinja::to_json_text(v, indent));
    }
    if (f == "default" || f == "d") {
      const value* d = a.get(0, "default_value");
      const value* boolean = a.get(1, "boolean");
      const bool use = boolean && boolean->truthy() ? !v.truthy() : v.is(K::undefined);
      return use ? (d ? *d : value::string("")) : v;
    }
    if (f == "join") {
      if (!v.is(K::list)) fail("|join of a " + std::string(v.type_name()));
      const value* sep = a.get(0, "d");
      std::string out;
      const std::string separator = sep ? jinja::to_output(*sep) : std::string();
      for (std::size_t i = 0; i < v.l->size(); ++i) {
        const std::string item = jinja::to_output((*v.l)[i]);
        charge(1 + item.size() + (i ? separator.size() : 0));
        if (i) out += separator;
        out += item;
      }
      return value::string(out);
    }
    if (f == "first" || f == "last") {
      if (!v.is(K::list)) fail("|" + f + " of a " + v.type_name());
      if (v.l->empty()) return value::undefined();
      return f == "first" ? v.l->front() : v.l->back();
    }
    if (f == "list") {
      if (v.is(K::list)) return v;
      if (v.is(K::dict)) {
        charge(v.d->size());
        value l = value::make_list();
        for (const auto& [k, x] : *v.d) l.l->push_back(value::string(k));
        return l;
      }
      if (v.is(K::string)) {
        charge(v.s.size());
        value l = value::make_list();
        const auto cps = code_points(v.s);
        for (std::size_t i = 0; i < cps.size(); ++i) l.l->push_back(value::string(from_code_points(cps, i, i + 1)));
        return l;
      }
      fail("|list of a " + std::string(v.type_name()));
    }
    fail("filter '" + f + "' is not supported");
  }

  static bool test(const std::string& t, const value& v) {
    if (t == "defined") return !v.is(K::undefined);
    if (t == "undefined") return v.is(K::undefined);
    if (t == "none") return v.is(K::none);
    if (t == "string") return v.is(K::string);
    if (t == "number" || t == "integer") return v.is(K::integer);
    if (t == "boolean") return v.is(K::boolean);
    if (t == "true") return v.is(K::boolean) && v.b;
    if (t == "false") return v.is(K::boolean) && !v.b;
    if (t == "mapping") return v.is(K::dict);
    if (t == "sequence") return v.is(K::list) || v.is(K::string) || v.is(K::dict);
    if (t == "iterable") return v.is(K::list) || v.is(K::string) || v.is(K::dict);
    if (t == "odd" || t == "even") {
      if (!v.is(K::integer)) fail("test '" + t + "' on a " + v.type_name());
      return (v.i % 2 != 0) == (t == "odd");
    }
    fail("test '" + t + "' is not supported");
  }

  std::vector<std::map<std::string, value>> scopes_;
  const uint64_t work_limit_;
  uint64_t work_left_;
};

}  // namespace

const char* to_string(chat_family f) {
  switch (f) {
    case chat_family::llama3: return "llama3";
    case chat_family::chatml: return "chatml";
    case chat_family::other: return "other";
  }
  return "?";
}

chat_template::chat_template(std::string source, nlohmann::ordered_json special_tokens)
    : source_(std::move(source)), special_tokens_(std::move(special_tokens)), program_(jinja::parse_template(source_)) {}

chat_family chat_template::family() const {
  if (source_.find("<|start_header_id|>") != std::string::npos && source_.find("<|eot_id|>") != std::string::npos)
    return chat_family::llama3;
  if (source_.find("<|im_start|>") != std::string::npos && source_.find("<|im_end|>") != std::string::npos)
    return chat_family::chatml;
  return chat_family::other;
}

std::string chat_template::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) throw template_error("chat template: messages must be a list");
  std::map<std::string, value> globals;
  for (const auto& [k, v] : special_tokens_.items()) globals[k] = value::from_json(v);
  globals["messages"] = value::from_json(messages);
  globals["add_generation_prompt"] = value::boolean(add_generation_prompt);
  globals["tools"] = value::none();
  globals["documents"] = value::none();
  for (const auto& [k, v] : extra.items()) globals[k] = value::from_json(v);
  const auto input_bytes = messages.dump().size() + extra.dump().size() + special_tokens_.dump().size();
  const uint64_t limit = static_cast<uint64_t>(budget_.base_units) +
                         saturating_mul(static_cast<uint64_t>(budget_.units_per_input_byte), input_bytes);
  std::string out;
  renderer(std::move(globals), limit).run(program_, out);
  return out;
}

nlohmann::ordered_json special_token_variables(const nlohmann::ordered_json& cfg) {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!cfg.contains(key)) continue;
    const auto& v = cfg[key];
    if (v.is_string()) vars[key] = v;
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) vars[key] = v["content"];
  }
  if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : cfg["additional_special_tokens"]) {
      if (t.is_string()) list.push_back(t);
      else if (t.is_object() && t.contains("content") && t["content"].is_string()) list.push_back(t["content"]);
    }
    vars["additional_special_tokens"] = list;
  }
  return vars;
}

chat_template chat_template::from_checkpoint(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  std::ifstream in(path);
  if (!in) throw load_error(path + ": cannot open (a chat needs the checkpoint's tokenizer_config.json)");
  nlohmann::ordered_json cfg;
  try {
    cfg = nlohmann::ordered_json::parse(in);
  } catch (const std::exception& e) {
    throw load_error(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!cfg.contains("chat_template")) throw load_error(path + ": no chat_template");
  const auto& t = cfg["chat_template"];
  std::string source;
  if (t.is_string()) {
    source = t.get<std::string>();
  } else if (t.is_array()) {  // named templates: the one called "default"
    for (const auto& named : t)
      if (named.is_object() && named.value("name", std::string()) == "default" && named.contains("template") &&
          named["template"].is_string())
        source = named["template"].get<std::string>();
    if (source.empty()) throw load_error(path + ": chat_template has no template named 'default'");
  } else {
    throw load_error(path + ": chat_template is neither a string nor a list");
  }
  try {
    return chat_template(std::move(source), special_token_variables(cfg));
  } catch (const template_error& e) {
    throw template_error(path + ": " + e.what());
  }
}

}  // namespace dls::gpu
