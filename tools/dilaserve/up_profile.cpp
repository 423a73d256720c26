#include "dilaserve/up_profile.hpp"

#include "dilaserve/shell_quote.hpp"
#include "dilaserve/write_profile.hpp"
#include "policies/step_cost.hpp"
#include "runtime/process.hpp"

#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
namespace rt = dls::runtime;

namespace dls::cli {

namespace {

// Timed steps per profile sample when `up` measures the profile: the median of a few is
// stable to a few per cent on the CPU engine, and the whole grid then takes well under a second
// for the shipped model.
constexpr int up_profile_reps = 3;

// The buffer size of the link measurement `up` makes: the bandwidth a KV cache of a few MB sees
// (the shipped model's largest is 256 KB, a d_model 512 model's at L = 1024 16 MB), in a
// fraction of a second on any transport here.
constexpr std::size_t link_sizes = std::size_t{4} << 20;

// The longest canvas (prompt + answer) the cluster's limits admit, or 0 when they leave it to the
// model's context: no step beyond it ever runs, so the profile measures none (a refresh of 4,096
// positions takes seconds on this CPU engine even with a narrow model). At least four blocks and
// a token each, so that a quarter of it still holds a prompt and a block.
int longest_admitted_canvas(const rt::cluster_config& cfg) {
  const auto& l = cfg.limits;
  if (l.max_prompt_tokens <= 0 || l.max_gen_length <= 0) return 0;
  const int64_t floor = 4 * (int64_t{cfg.engine.decode.block_length} + 1);
  return static_cast<int>(std::min<int64_t>(std::max(l.max_prompt_tokens + l.max_gen_length, floor), std::numeric_limits<int>::max()));
}

// A file's size and modification time: a rebuilt binary or rewritten weights measure again.
std::string identity_of(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) return p.filename().string() + ":missing";
  const auto mtime = fs::last_write_time(p, ec).time_since_epoch().count();
  return p.filename().string() + ":" + std::to_string(size) + ":" + std::to_string(mtime);
}

std::string model_identity(const std::string& model) {
  std::error_code ec;
  if (!fs::is_directory(model, ec)) return identity_of(model);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(model, ec))
    if (e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string out;
  for (const auto& f : files) out += (out.empty() ? "" : ",") + identity_of(f);
  return out;
}

std::string profile_key(const rt::cluster_config& cfg, const std::vector<int>& tp, int longest) {
  std::ostringstream key;
  key << "model " << cfg.model_path << " [" << model_identity(cfg.model_path) << "] block "
      << cfg.engine.decode.block_length << " tp";
  for (int t : tp) key << " " << t;
  key << " ucx " << cfg.ucx.tls << (cfg.ucx.encrypt ? " sealed" : " clear");
  if (longest > 0) key << " longest " << longest;
  const auto self = rt::self_executable();
  key << " dilaserve " << self << " [" << identity_of(self) << "]";
  return key.str();
}

// A stable file name for a key (the key file beside it settles any collision).
std::string key_name(const std::string& key) {
  char name[32];
  std::snprintf(name, sizeof name, "profile-%016llx", static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
  return name;
}

bool holds(const fs::path& profile, const fs::path& key_file, const std::string& key) {
  std::ifstream in(key_file);
  std::string line;
  return fs::exists(profile) && std::getline(in, line) && line == key;
}

// A cached profile the policies cannot read is measured again rather than handed to the head,
// which would refuse it and stop `up`.
bool usable(const fs::path& profile) {
  try {
    policy::load_step_cost_profile(profile.string());
    return true;
  } catch (const std::exception& e) {
    std::cerr << "dilaserve: warning: measuring again: the cached profile " << profile.string() << " is unusable: "
              << e.what() << "\n";
    return false;
  }
}

// Into the shared cache by rename, so a cluster starting beside this one reads either nothing
// or a whole profile.
void store(const fs::path& profile, const std::string& key, const fs::path& cache, const std::string& name) {
  std::error_code ec;
  fs::create_directories(cache, ec);
  const auto tmp = "." + name + "." + std::to_string(::getpid());
  fs::copy_file(profile, cache / (tmp + ".yaml"), fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(cache / (tmp + ".yaml"), cache / (name + ".yaml"), ec);
  if (!ec) {
    std::ofstream(cache / (tmp + ".key")) << key << "\n";
    fs::rename(cache / (tmp + ".key"), cache / (name + ".key"), ec);
  }
  if (ec)
    std::cerr << "dilaserve: warning: cannot keep the profile in " << cache.string() << ": " << ec.message() << "\n";
}

}  // namespace

std::string ensure_profile(const rt::cluster_config& cfg, const std::string& dir, const std::string& shared_cache) {
  if (!cfg.scheduler.profile_path.empty()) return cfg.scheduler.profile_path;
  std::set<int> degrees{1};
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const auto& n : cfg.nodes) {
    if (n.devices.kind != "cpu") {
      // The measurement runs the CPU engine here; GPU step costs must come from the GPU.
      std::cout << "no step-cost profile: node " << n.name << " runs on " << n.devices.kind
                << " devices and `up` measures only CPU engines; the groups decide without step costs "
                   "until scheduler.profile names one measured on the GPU (docs/cuda.md)\n";
      return "";
    }
    for (int g : n.groups)
      if (g <= cores) degrees.insert(g);
  }
  const std::vector<int> tp(degrees.begin(), degrees.end());
  const int longest = longest_admitted_canvas(cfg);
  const auto key = profile_key(cfg, tp, longest);
  const auto path = fs::path(dir) / "profile.yaml";
  const auto key_path = fs::path(dir) / "profile.key";
  if (holds(path, key_path, key)) return path.string();
  const auto name = key_name(key);
  if (!shared_cache.empty()) {
    const auto cached = fs::path(shared_cache) / (name + ".yaml");
    std::error_code ec;
    if (holds(cached, fs::path(shared_cache) / (name + ".key"), key) && usable(cached) &&
        fs::copy_file(cached, path, fs::copy_options::overwrite_existing, ec)) {
      std::ofstream(key_path) << key << "\n";
      std::cout << "step-cost profile: measured before on this machine for the same model, settings and binary ("
                << cached.string() << ")\n";
      return path.string();
    }
  }
  std::cout << "measuring the step-cost profile (TP";
  for (int t : tp) std::cout << " " << t;
  if (longest > 0) std::cout << ", canvases up to " << longest << " tokens";
  std::cout << ") into " << path.string() << "\n";
  write_profile(cfg.model_path, tp, cfg.engine.decode.block_length, up_profile_reps, longest, path.string());
  // The data plane's link between two processes with the cluster's ucx.tls, for the live choice
  // between moving a mid-block KV cache and rebuilding it (policy::compare_kv_move). Without it
  // the groups rebuild and their logs say why.
  const auto log = (fs::path(dir) / "logs" / "link.log").string();
  const auto cmd = shell_quote(rt::self_executable()) + " bench-migration --links-only --tls " + shell_quote(cfg.ucx.tls) +
                   " --encrypt " + (cfg.ucx.encrypt ? "true" : "false") +
                   " --sizes " + std::to_string(link_sizes) + " --reps " + std::to_string(up_profile_reps) +
                   " --profile " + shell_quote(path.string()) + " > " + shell_quote(log) + " 2>&1";
  std::cout << "measuring the UCX link (ucx.tls " << cfg.ucx.tls << (cfg.ucx.encrypt ? ", sealed" : ", in the clear") << ")\n";
  const bool linked = std::system(cmd.c_str()) == 0;
  if (!linked)
    std::cout << "could not measure the UCX link (see " << log
              << "): mid-block migrations rebuild the KV cache instead of moving it\n";
  std::ofstream(key_path) << key << "\n";
  // A failed link measurement may be passing: only a whole profile is shared.
  if (linked && !shared_cache.empty()) store(path, key, shared_cache, name);
  return path.string();
}

}  // namespace dls::cli
