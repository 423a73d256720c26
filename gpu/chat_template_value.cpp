#include "gpu/chat_template_value.hpp"

#include <nlohmann/json.hpp>

namespace dls::gpu::jinja {

value value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      list l;
      for (const auto& e : j) l.push_back(from_json(e));
      return make_list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      dict d;
      for (const auto& [k, v] : j.items()) d.emplace_back(k, from_json(v));
      return make_dict(std::move(d));
    }
    default: throw template_error("chat template input: floating-point and binary values are not supported");
  }
}

bool value::truthy() const {
  switch (k) {
    case kind::undefined:
    case kind::none: return false;
    case kind::boolean: return b;
    case kind::integer: return i != 0;
    case kind::string: return !s.empty();
    case kind::list: return !l->empty();
    case kind::dict: return !d->empty();
  }
  return false;
}

const value* value::find(const std::string& key) const {
  if (k != kind::dict) return nullptr;
  for (const auto& [name, v] : *d)
    if (name == key) return &v;
  return nullptr;
}

void value::set(const std::string& key, value v) {
  for (auto& [name, old] : *d)
    if (name == key) {
      old = std::move(v);
      return;
    }
  d->emplace_back(key, std::move(v));
}

const char* value::type_name() const {
  switch (k) {
    case kind::undefined: return "undefined";
    case kind::none: return "none";
    case kind::boolean: return "bool";
    case kind::integer: return "int";
    case kind::string: return "str";
    case kind::list: return "list";
    case kind::dict: return "dict";
  }
  return "?";
}

std::string to_output(const value& v) {
  switch (v.k) {
    case value::kind::undefined: return "";
    case value::kind::none: return "None";
    case value::kind::boolean: return v.b ? "True" : "False";
    case value::kind::integer: return std::to_string(v.i);
    case value::kind::string: return v.s;
    default: throw template_error(std::string("chat template: printing a ") + v.type_name() + " is not supported");
  }
}

bool equal(const value& a, const value& b) {
  using K = value::kind;
  auto numeric = [](const value& v) { return v.k == K::integer || v.k == K::boolean; };
  if (numeric(a) && numeric(b)) return (a.k == K::integer ? a.i : a.b) == (b.k == K::integer ? b.i : b.b);
  if (a.k != b.k) return false;
  switch (a.k) {
    case K::undefined:
    case K::none: return true;
    case K::string: return a.s == b.s;
    case K::list:
      if (a.l->size() != b.l->size()) return false;
      for (std::size_t i = 0; i < a.l->size(); ++i)
        if (!equal((*a.l)[i], (*b.l)[i])) return false;
      return true;
    case K::dict:
      if (a.d->size() != b.d->size()) return false;
      for (const auto& [key, v] : *a.d) {
        const value* o = b.find(key);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    default: return false;
  }
}

namespace {

void json_string(const std::string& s, std::string& out) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void json_value(const value& v, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent * d), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.k) {
    case value::kind::undefined: throw template_error("chat template: tojson of an undefined value");
    case value::kind::none: out += "null"; return;
    case value::kind::boolean: out += v.b ? "true" : "false"; return;
    case value::kind::integer: out += std::to_string(v.i); return;
    case value::kind::string: json_string(v.s, out); return;
    case value::kind::list:
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_value((*v.l)[i], indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    case value::kind::dict:
      if (v.d->empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (std::size_t i = 0; i < v.d->size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_string((*v.d)[i].first, out);
        out += ": ";
        json_value((*v.d)[i].second, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
  }
}

}  // namespace

std::string to_json_text(const value& v, int indent) {
  std::string out;
  json_value(v, indent, 0, out);
  return out;
}

}  // namespace dls::gpu::jinja
