#include "config/yaml_checker.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace dls::config {

void yaml_checker::fail(const YAML::Mark& m, const std::string& what) const {
  std::ostringstream os;
  os << file_;
  if (!m.is_null()) os << ':' << m.line + 1 << ':' << m.column + 1;
  os << ": error: " << what;
  throw config_error(os.str());
}

YAML::Node yaml_checker::load(const std::string& text) const {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail(e.mark, e.msg);
  }
  if (!root || root.IsNull()) fail(YAML::Mark::null_mark(), "the file is empty");
  return root;
}

void yaml_checker::expect_map(const YAML::Node& n, const std::string& ctx) const {
  if (!n.IsMap()) fail(n, ctx + " must be a mapping");
}

void yaml_checker::check_keys(const YAML::Node& map, const std::set<std::string>& allowed,
                              const std::string& ctx) const {
  expect_map(map, ctx);
  std::set<std::string> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) fail(kv.first, "keys in " + ctx + " must be plain names");
    auto key = kv.first.Scalar();
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(kv.first, "unknown key '" + key + "' in " + ctx + " (allowed: " + list + ")");
    }
    if (!seen.insert(key).second) fail(kv.first, "duplicate key '" + key + "' in " + ctx);
  }
}

YAML::Node yaml_checker::require(const YAML::Node& map, const std::string& key, const std::string& ctx) const {
  auto v = map[key];
  if (!v) fail(map, "missing field '" + key + "' in " + ctx);
  return v;
}

std::string yaml_checker::str(const YAML::Node& n, const std::string& what) const {
  if (!n.IsScalar()) fail(n, what + " must be a string");
  return n.Scalar();
}

long long yaml_checker::integer(const YAML::Node& n, const std::string& what, long long lo, long long hi) const {
  if (!n.IsScalar()) fail(n, what + " must be an integer");
  long long v = 0;
  try {
    std::size_t used = 0;
    v = std::stoll(n.Scalar(), &used);
    if (used != n.Scalar().size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    fail(n, what + " must be an integer, got '" + n.Scalar() + "'");
  }
  if (v < lo || v > hi)
    fail(n, what + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
  return v;
}

double yaml_checker::real(const YAML::Node& n, const std::string& what, double lo, double hi) const {
  if (!n.IsScalar()) fail(n, what + " must be a number");
  double v = 0;
  try {
    std::size_t used = 0;
    v = std::stod(n.Scalar(), &used);
    if (used != n.Scalar().size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    fail(n, what + " must be a number, got '" + n.Scalar() + "'");
  }
  if (!(v >= lo && v <= hi)) {
    std::ostringstream os;
    os << what << " must be in [" << lo << ", " << hi << "], got " << n.Scalar();
    fail(n, os.str());
  }
  return v;
}

bool yaml_checker::boolean(const YAML::Node& n, const std::string& what) const {
  return one_of(n, what, {"true", "false"}) == "true";
}

std::string yaml_checker::one_of(const YAML::Node& n, const std::string& what,
                                 const std::set<std::string>& choices) const {
  auto v = str(n, what);
  if (!choices.count(v)) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    fail(n, what + " must be one of " + list + ", got '" + v + "'");
  }
  return v;
}

std::vector<int> yaml_checker::int_list(const YAML::Node& n, const std::string& what, int lo, int hi) const {
  if (!n.IsSequence()) fail(n, what + " must be a list of integers, e.g. [2] or [1, 1]");
  std::vector<int> out;
  for (const auto& e : n) out.push_back(static_cast<int>(integer(e, what + " entries", lo, hi)));
  return out;
}

std::string resolve_path(const std::string& p, const std::string& base_dir) {
  if (p.empty()) return p;
  fs::path path = p;
  if (p.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    path = fs::path(home ? home : "/") / p.substr(2);
  } else if (path.is_relative()) {
    path = fs::path(base_dir) / path;
  }
  return fs::weakly_canonical(path).string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> keys_of(std::initializer_list<std::set<std::string>> sets) {
  std::set<std::string> out;
  for (const auto& s : sets) out.insert(s.begin(), s.end());
  return out;
}

}  // namespace dls::config
