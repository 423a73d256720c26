#include "dilaserve/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace dls::cli {

progress_bar::progress_bar(std::string label, std::size_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled && isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

progress_bar::~progress_bar() { finish(); }

void progress_bar::advance(std::size_t n, const std::string& detail) {
  done_ += n;
  if (!detail.empty()) detail_ = detail;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ > std::chrono::milliseconds(100) || done_ >= total_) {
    last_draw_ = now;
    draw(false);
  }
}

void progress_bar::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

void progress_bar::draw(bool final_draw) {
  if (!enabled_) return;
  constexpr int width = 30;
  double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  if (frac > 1.0) frac = 1.0;
  int filled = static_cast<int>(frac * width);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double eta = frac > 0 ? secs / frac - secs : 0.0;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r%s [%s] %zu/%zu %5.1fs eta %5.1fs %s\x1b[K", label_.c_str(), bar.c_str(),
               done_, total_, secs, eta, detail_.c_str());
  if (final_draw) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace dls::cli
