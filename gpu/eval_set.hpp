#pragma once
// The model's eval set (eval.jsonl): one problem per line with `prompt`, `task`, and either
// `answer` (exact) or `valid` (every acceptable answer), plus an optional `gen_length`.
#include <string>
#include <vector>

namespace dls::gpu {

struct eval_problem {
  std::string prompt;
  std::string task;
  std::vector<std::string> valid;
  int gen_length = 0;  // 0: use the caller's default

  bool accepts(const std::string& answer) const;
};

/// Throws load_error naming the file and line of a malformed entry.
std::vector<eval_problem> load_eval_set(const std::string& path);

}  // namespace dls::gpu
