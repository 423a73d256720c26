#pragma once
// A one-line progress bar on stderr for long CLI runs (eval, submit, sim).
// It redraws at most ~10 times a second and stays silent when stderr is not a terminal
// unless forced, so logs and --json output stay clean.
#include <chrono>
#include <cstddef>
#include <string>

namespace dls::cli {

class progress_bar {
 public:
  progress_bar(std::string label, std::size_t total, bool enabled = true);
  ~progress_bar();
  void advance(std::size_t n = 1, const std::string& detail = {});
  void finish();

 private:
  void draw(bool final_draw);
  std::string label_;
  std::size_t total_;
  std::size_t done_ = 0;
  bool enabled_;
  bool finished_ = false;
  std::string detail_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace dls::cli
