#pragma once
// Helpers for the multi-process runtime tests: each test gets its own state directory
// and a cluster file with port 0 everywhere (the head reports the port it got), runs
// the real `dilaserve` binary, and stops every process it started, even on failure.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace dls::test {

struct cli_result {
  int rc = -1;
  std::string out;
  std::string err;
};

/// Runs `dilaserve ARGS...` to completion and captures its output.
cli_result run_cli(const std::vector<std::string>& args);

/// A `dilaserve ARGS...` running in the background; `wait()` collects it.
class background_cli {
 public:
  explicit background_cli(const std::vector<std::string>& args);
  ~background_cli();
  background_cli(background_cli&& other) noexcept
      : pid_(other.pid_), out_path_(std::move(other.out_path_)), err_path_(std::move(other.err_path_)) {
    other.pid_ = -1;
  }
  background_cli(const background_cli&) = delete;
  background_cli& operator=(const background_cli&) = delete;
  cli_result wait();
  /// Sends `sig` to it (an interrupt, as a terminal's Ctrl-C would).
  void signal(int sig) const;

 private:
  int pid_ = -1;
  std::string out_path_, err_path_;
};

/// Sets an environment variable for the processes of the clusters started while it lives (they
/// inherit it through `up`), and removes it again.
struct scoped_env {
  std::string name;
  scoped_env(std::string n, const std::string& value) : name(std::move(n)) { ::setenv(name.c_str(), value.c_str(), 1); }
  ~scoped_env() { ::unsetenv(name.c_str()); }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
};

/// A scratch directory removed at the end of the test.
class scratch_dir {
 public:
  scratch_dir();
  ~scratch_dir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Writes a linear step-cost profile for TP 1 and TP 2 into `dir` and returns its path: the
/// same per-request and per-row costs as a TP 1 step, scaled down for TP 2, and a fixed cost of
/// its own for a TP 2 step. A slow fixed cost makes two TP 1 groups the optimizer's choice at
/// any load; the TP 1 one makes a TP 2 group the faster for a lone request.
std::string write_two_degree_profile(const scratch_dir& dir, double tp2_fixed_s);

/// Copies `configs/NAME` with every port set to 0 and the model path made absolute.
/// `dead_after_ms` > 0 overrides heartbeat.dead_after_ms (for tests that pause a node).
/// `overrides` is a YAML mapping whose top-level keys replace the file's (e.g. "limits: {...}").
std::string write_test_config(const scratch_dir& dir, const std::string& name, int dead_after_ms = 0,
                              const std::string& overrides = "");

/// A cluster started with `dilaserve up` and stopped (down, then kill) on destruction.
class cluster {
 public:
  explicit cluster(const std::string& config_name, int dead_after_ms = 0, const std::string& overrides = "");
  ~cluster();
  /// Runs a CLI command against this cluster (adds --state-dir).
  cli_result cli(std::vector<std::string> args) const;
  /// Same, in the background.
  background_cli cli_background(std::vector<std::string> args) const;
  nlohmann::json json_cli(std::vector<std::string> args) const;
  int pid_of(const std::string& name) const;  // from the state directory
  const std::string& state_dir() const { return state_dir_; }
  const scratch_dir& scratch() const { return scratch_; }
  const std::string& up_output() const { return up_.out; }
  const std::string& up_error_output() const { return up_.err; }

 private:
  scratch_dir scratch_;
  std::string state_dir_;
  cli_result up_;
};

/// The shipped model's folder.
std::string model_dir();

}  // namespace dls::test

namespace dls::test {

struct problem {
  std::string prompt;
  std::vector<std::string> valid;
  int gen_length = 0;
};

/// The first `n` problems of the shipped model's eval set; with `min_answer_chars`, only those
/// whose every valid answer has at least that many characters (answers long enough to outlast
/// their first block).
std::vector<problem> eval_problems(std::size_t n, std::size_t min_answer_chars = 0);

/// Writes them as a `submit --file` JSONL file.
std::string write_prompts(const scratch_dir& dir, const std::vector<problem>& problems);

/// The answers of the shipped model at temperature 0 with the engine settings of
/// configs/CONFIG_NAME, decoded in this process on one device (TP = 1, no runtime).
/// `threshold` < 0 takes the config's τ.
std::vector<std::string> reference_answers(const std::string& config_name, const std::vector<problem>& problems,
                                           double threshold = -1);

/// The `status` row of the cluster's one TP group; throws unless there is exactly one.
nlohmann::json only_group(const cluster& c);

/// A node's state in `status` (ALIVE, DEAD, ...); empty when the node is not listed.
std::string node_state(const cluster& c, const std::string& node);

/// Polls `probe` (a CLI query) until it returns true or `seconds` pass.
bool eventually(double seconds, const std::function<bool()>& probe);

}  // namespace dls::test
