#pragma once
// Strict reading of a YAML file: every check fails with one line that names the file, the line
// and column of the offending node, and the problem, so a bad file is refused before anything
// runs. The running cluster's file and the simulator's share this reader and its messages.
#include <yaml-cpp/yaml.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace dls::config {

/// A configuration problem, already formatted as "FILE:LINE:COL: error: PROBLEM".
class config_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class yaml_checker {
 public:
  explicit yaml_checker(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Mark& m, const std::string& what) const;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const { fail(n.Mark(), what); }

  /// Parses `text`; a syntax error or an empty file fails like any check.
  YAML::Node load(const std::string& text) const;

  void expect_map(const YAML::Node& n, const std::string& ctx) const;
  /// Rejects unknown and duplicate keys (yaml-cpp keeps duplicates during iteration).
  void check_keys(const YAML::Node& map, const std::set<std::string>& allowed, const std::string& ctx) const;
  YAML::Node require(const YAML::Node& map, const std::string& key, const std::string& ctx) const;

  std::string str(const YAML::Node& n, const std::string& what) const;
  long long integer(const YAML::Node& n, const std::string& what, long long lo, long long hi) const;
  double real(const YAML::Node& n, const std::string& what, double lo, double hi) const;
  bool boolean(const YAML::Node& n, const std::string& what) const;
  std::string one_of(const YAML::Node& n, const std::string& what, const std::set<std::string>& choices) const;
  std::vector<int> int_list(const YAML::Node& n, const std::string& what, int lo, int hi) const;

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

/// `p` against `base_dir` when relative ("~/" is the home directory), made canonical.
std::string resolve_path(const std::string& p, const std::string& base_dir);

/// The whole file; throws std::runtime_error naming it when it cannot be read.
std::string read_text(const std::string& path);

/// The union of key sets (a section's shared keys and a file's own).
std::set<std::string> keys_of(std::initializer_list<std::set<std::string>> sets);

}  // namespace dls::config
