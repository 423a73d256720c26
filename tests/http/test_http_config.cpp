// The cluster file's `http` section: parsed strictly, keys read at load time, and every
// mistake one line naming the file, position and problem.
#define BOOST_TEST_MODULE http_config
#include "runtime/cluster_config.hpp"

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace rt = dls::runtime;
namespace fs = std::filesystem;

namespace {

struct keys_dir {
  keys_dir() : path(fs::temp_directory_path() / ("dls-http-config-" + std::to_string(::getpid()))) {
    fs::create_directories(path);
    std::ofstream(path / "keys") << "# a comment\n\n  key-number-one-0123456789  \nkey-number-two-0123456789\n";
    std::ofstream(path / "short") << "tiny\n";
    std::ofstream(path / "empty") << "# nothing\n";
  }
  ~keys_dir() { fs::remove_all(path); }
  fs::path path;
};

std::string file_with(const std::string& http) {
  return "name: t\nauth: {token: secret-token}\nhead: {host: 127.0.0.1, port: 0}\n"
         "nodes:\n  - name: a\n    devices: {kind: cpu, count: 1}\nmodel: {path: /tmp}\n" +
         http;
}

std::string error_of(const keys_dir& d, const std::string& http) {
  try {
    rt::parse_cluster_config(file_with(http), "c.yaml", d.path.string());
  } catch (const rt::config_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(without_a_section_there_is_no_gateway) {
  keys_dir d;
  auto cfg = rt::parse_cluster_config(file_with(""), "c.yaml", d.path.string());
  BOOST_TEST(!cfg.http.enabled);
}

BOOST_AUTO_TEST_CASE(a_full_section_parses_and_reads_the_keys) {
  keys_dir d;
  auto cfg = rt::parse_cluster_config(
      file_with("http: {host: 127.0.0.1, port: 0, api_keys_file: keys, max_body_bytes: 4096, max_concurrent: 3,"
                " metrics_public: true, request_timeout_s: 9}\n"),
      "c.yaml", d.path.string());
  BOOST_TEST(cfg.http.enabled);
  BOOST_TEST(cfg.http.api_keys == (std::vector<std::string>{"key-number-one-0123456789", "key-number-two-0123456789"}));
  BOOST_TEST(cfg.http.api_keys_file == (d.path / "keys").string());
  BOOST_TEST(cfg.http.max_body_bytes == 4096u);
  BOOST_TEST(cfg.http.max_concurrent == 3);
  BOOST_TEST(cfg.http.metrics_public);
  BOOST_TEST(cfg.http.request_timeout_s == 9);
}

BOOST_AUTO_TEST_CASE(mistakes_are_one_line_naming_the_problem) {
  keys_dir d;
  std::vector<std::pair<std::string, std::string>> cases{
      {"http: {host: 127.0.0.1, port: 0, api_keys_file: keys, tls: on}\n", "unknown key 'tls' in http"},
      {"http: {host: 127.0.0.1, api_keys_file: keys}\n", "missing field 'port' in http"},
      {"http: {host: 127.0.0.1, port: 0}\n", "missing field 'api_keys_file' in http"},
      {"http: {host: 127.0.0.1, port: 0, api_keys_file: nope}\n", "cannot read api_keys_file"},
      {"http: {host: 127.0.0.1, port: 0, api_keys_file: short}\n", "shorter than 16 characters"},
      {"http: {host: 127.0.0.1, port: 0, api_keys_file: empty}\n", "holds no key"},
      {"http: {host: 127.0.0.1, port: 70000, api_keys_file: keys}\n", "http.port must be in [0, 65535]"},
      {"http: {host: 127.0.0.1, port: 0, api_keys_file: keys, max_concurrent: 0}\n", "http.max_concurrent"},
      {"http: {host: 127.0.0.1, port: 0, api_keys_file: keys, max_body_bytes: 10}\n", "http.max_body_bytes"},
      {"http: {host: 127.0.0.1, port: 0, api_keys_file: keys, metrics_public: maybe}\n", "http.metrics_public"}};
  for (const auto& [http, words] : cases) {
    auto err = error_of(d, http);
    BOOST_TEST_CONTEXT(http << " -> " << err) {
      BOOST_TEST(err.rfind("c.yaml:8:", 0) == 0u);
      BOOST_TEST(err.find(words) != std::string::npos);
      BOOST_TEST(err.find('\n') == std::string::npos);
    }
  }
}
