#include "http_support.hpp"

#include "runtime/state_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dls::test {

int run_program(const std::vector<std::string>& argv, std::string& output) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  int pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> c;
    for (const auto& a : argv) c.push_back(const_cast<char*>(a.c_str()));
    c.push_back(nullptr);
    ::execvp(c[0], c.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  output.clear();
  char buf[4096];
  for (;;) {
    auto n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int start_program(const std::vector<std::string>& argv, const std::string& log) {
  int pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> c;
    for (const auto& a : argv) c.push_back(const_cast<char*>(a.c_str()));
    c.push_back(nullptr);
    ::execvp(c[0], c.data());
    ::_exit(127);
  }
  return pid;
}

void kill_program(int pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

std::string api_key() {
  std::ifstream in(std::string(DLS_SOURCE_DIR) + "/configs/local-api-keys");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') return line;
  throw std::runtime_error("configs/local-api-keys holds no key");
}

namespace {

// configs/local.yaml's http section with `changes` applied, as a fixture override (which
// replaces the whole section, so it carries the port and key path the fixture would set).
std::string http_override(const std::map<std::string, std::string>& changes) {
  auto http = YAML::LoadFile(std::string(DLS_SOURCE_DIR) + "/configs/local.yaml")["http"];
  http["port"] = 0;
  http["api_keys_file"] = std::string(DLS_SOURCE_DIR) + "/configs/" + http["api_keys_file"].as<std::string>();
  for (const auto& [k, v] : changes) http[k] = v;
  http.SetStyle(YAML::EmitterStyle::Flow);  // the parsed node keeps its block style otherwise
  YAML::Emitter out;
  out << http;
  return std::string("http: ") + out.c_str();
}

}  // namespace

http_cluster::http_cluster(const std::map<std::string, std::string>& http, int dead_after_ms,
                           const std::string& overrides)
    : cluster_("local.yaml", dead_after_ms, (http.empty() ? std::string() : http_override(http) + "\n") + overrides) {
  port_ = runtime::load_state(cluster_.state_dir()).http_port;
  if (port_ <= 0) throw std::runtime_error("the state directory records no HTTP port");
}

std::string http_cluster::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

http_reply http_cluster::call(const std::string& method, const std::string& path, const std::string& body,
                              bool with_key, const std::vector<std::string>& extra) const {
  const auto& dir = cluster_.scratch();
  static int counter = 0;
  auto tag = std::to_string(counter++);
  auto body_file = dir.file("curl-body-" + tag), head_file = dir.file("curl-head-" + tag);
  std::vector<std::string> argv{"curl", "-sS", "-X", method, "-o", body_file, "-D", head_file, "-w", "%{http_code}",
                                "--max-time", "120"};
  if (with_key) {
    argv.push_back("-H");
    argv.push_back("Authorization: Bearer " + api_key());
  }
  if (!body.empty()) {
    auto req_file = dir.file("curl-req-" + tag);
    std::ofstream(req_file) << body;
    argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", "@" + req_file});
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url(path));
  std::string out;
  int rc = run_program(argv, out);
  http_reply r;
  std::ifstream b(body_file), h(head_file);
  std::stringstream bs, hs;
  bs << b.rdbuf();
  hs << h.rdbuf();
  r.body = bs.str();
  r.headers = hs.str();
  if (rc == 0) {
    r.status = std::stoi(out);
  } else {
    r.body = "curl exited " + std::to_string(rc) + ": " + out;
  }
  return r;
}

nlohmann::json http_cluster::status() const {
  auto r = call("GET", "/v1/cluster");
  if (r.status != 200) throw std::runtime_error("GET /v1/cluster: " + std::to_string(r.status) + " " + r.body);
  return nlohmann::json::parse(r.body);
}

std::string write_expected(const scratch_dir& dir, std::size_t n) {
  auto problems = eval_problems(n);
  auto answers = reference_answers("local.yaml", problems);
  nlohmann::json j = nlohmann::json::array();
  for (std::size_t i = 0; i < problems.size(); ++i)
    j.push_back({{"prompt", problems[i].prompt}, {"gen_length", problems[i].gen_length}, {"expected", answers[i]}});
  auto path = dir.file("expected.json");
  std::ofstream(path) << j.dump();
  return path;
}

}  // namespace dls::test
