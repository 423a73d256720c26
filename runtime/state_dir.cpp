#include "runtime/state_dir.hpp"

#include "runtime/pki.hpp"

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace dls::runtime {

std::string resolve_state_dir(const std::string& flag) {
  if (!flag.empty()) return fs::absolute(flag).string();
  if (const char* env = std::getenv("DILASERVE_STATE_DIR"); env && *env)
    return fs::absolute(env).string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/tmp") / ".dilaserve").string();
}

std::string state_file(const std::string& dir) { return (fs::path(dir) / "cluster.json").string(); }

void save_state(const std::string& dir, const cluster_state& st) {
  fs::create_directories(dir);
  nlohmann::json j;
  j["cluster"] = st.cluster;
  j["config_file"] = st.config_file;
  j["head_host"] = st.head_host;
  j["head_port"] = st.head_port;
  j["token_file"] = st.token_file;
  if (st.http_port > 0) {
    j["http_host"] = st.http_host;
    j["http_port"] = st.http_port;
  }
  j["tls_dir"] = st.tls_dir;
  j["insecure"] = st.insecure;
  j["processes"] = nlohmann::json::array();
  for (const auto& p : st.processes)
    j["processes"].push_back({{"role", p.role},
                              {"name", p.name},
                              {"pid", p.pid},
                              {"log", p.log},
                              {"start_ticks", p.identity.start_ticks},
                              {"boot_id", p.identity.boot_id},
                              {"cmdline", p.identity.cmdline}});
  // Written to a temporary name and renamed, so a reader never sees half a file.
  auto tmp = state_file(dir) + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  fs::rename(tmp, state_file(dir));
}

cluster_state load_state(const std::string& dir) {
  std::ifstream in(state_file(dir));
  if (!in)
    throw std::runtime_error("no cluster recorded in " + dir +
                             "; run `dilaserve up FILE` or pass --address and --token-file");
  nlohmann::json j;
  try {
    in >> j;
    cluster_state st;
    st.cluster = j.at("cluster");
    st.config_file = j.at("config_file");
    st.head_host = j.at("head_host");
    st.head_port = j.at("head_port");
    st.token_file = j.at("token_file");
    st.http_host = j.value("http_host", std::string{});
    st.http_port = j.value("http_port", 0);
    st.tls_dir = j.value("tls_dir", std::string());
    st.insecure = j.value("insecure", false);
    for (const auto& p : j.at("processes")) {
      process_record r{p.at("role"), p.at("name"), p.at("pid"), p.at("log"), {}};
      // Files written before identities were recorded lack them; `down` then signals nothing.
      r.identity.start_ticks = p.value("start_ticks", uint64_t{0});
      r.identity.boot_id = p.value("boot_id", std::string{});
      r.identity.cmdline = p.value("cmdline", std::vector<std::string>{});
      st.processes.push_back(std::move(r));
    }
    return st;
  } catch (const std::exception& e) {
    throw std::runtime_error(state_file(dir) + ": corrupt state file: " + e.what());
  }
}

std::string read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read token file " + path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) throw std::runtime_error("token file " + path + " is empty");
  return token;
}

void write_token(const std::string& path, const std::string& token) {
  fs::create_directories(fs::path(path).parent_path());
  write_private_file(path, token + "\n", 0600);
}

bool tokens_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

std::pair<std::string, int> split_address(const std::string& address) {
  auto pos = address.rfind(':');
  if (pos == std::string::npos || pos == 0)
    throw std::runtime_error("address '" + address + "' must be HOST:PORT");
  try {
    std::size_t used = 0;
    int port = std::stoi(address.substr(pos + 1), &used);
    if (used != address.size() - pos - 1 || port <= 0 || port > 65535) throw std::out_of_range("");
    return {address.substr(0, pos), port};
  } catch (const std::exception&) {
    throw std::runtime_error("address '" + address + "' has no valid port");
  }
}

}  // namespace dls::runtime
