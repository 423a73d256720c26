// The cluster CA and role certificates: what `up` and `dilaserve certs` make verifies, and
// every way a TLS identity can be wrong is refused with a message naming the file.
#define BOOST_TEST_MODULE test_runtime_pki
#include <boost/test/unit_test.hpp>

#include "runtime/pki.hpp"
#include "runtime/tls_head_check.hpp"

#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
namespace rt = dls::runtime;

namespace {

struct scratch {
  std::string path;
  scratch() {
    auto tmpl = (fs::temp_directory_path() / "dls-pki-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~scratch() { fs::remove_all(path); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string refusal(const rt::tls_identity& id) {
  try {
    rt::check_tls_identity(id);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_fresh_pki_verifies_for_every_role_with_private_keys) {
  scratch s;
  auto dir = s.path + "/tls";
  rt::make_cluster_pki(dir, "t");
  BOOST_TEST(rt::pki_complete(dir));
  struct stat sb{};
  BOOST_REQUIRE(::stat(dir.c_str(), &sb) == 0);
  BOOST_TEST((sb.st_mode & 077) == 0u);
  for (const char* role : rt::pki_roles) {
    auto id = rt::tls_files(dir, role);
    BOOST_TEST(refusal(id) == "", role);
    BOOST_REQUIRE(::stat(id.key.c_str(), &sb) == 0);
    BOOST_TEST((sb.st_mode & 077) == 0u, id.key);
  }
  BOOST_REQUIRE(::stat((dir + "/ca.key").c_str(), &sb) == 0);
  BOOST_TEST((sb.st_mode & 077) == 0u);
}

// Only the head serves TLS: its certificate may serve and not connect, every other role's may
// connect and not serve, and only the head's passes the connecting side's head check.
BOOST_AUTO_TEST_CASE(only_the_heads_certificate_may_serve) {
  scratch s;
  auto dir = s.path + "/tls";
  rt::make_cluster_pki(dir, "t");
  for (const std::string role : rt::pki_roles) {
    FILE* f = std::fopen(rt::tls_files(dir, role).cert.c_str(), "r");
    BOOST_REQUIRE(f);
    X509* x = PEM_read_X509(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    BOOST_REQUIRE(x);
    const uint32_t usage = X509_get_extended_key_usage(x);
    BOOST_TEST(((usage & XKU_SSL_SERVER) != 0) == (role == "head"), role);
    BOOST_TEST(((usage & XKU_SSL_CLIENT) != 0) == (role != "head"), role);
    BOOST_TEST(rt::is_head_certificate(x) == (role == "head"), role);
    X509_free(x);
  }
}

BOOST_AUTO_TEST_CASE(renewing_keeps_the_ca_and_replacing_it_makes_old_certificates_fail) {
  scratch s;
  auto dir = s.path + "/tls";
  rt::make_cluster_pki(dir, "t");
  auto old_ca = slurp(dir + "/ca.pem");
  fs::copy_file(dir + "/node.pem", s.path + "/old-node.pem");
  rt::make_cluster_pki(dir, "t");  // renew: same CA
  BOOST_TEST(old_ca == slurp(dir + "/ca.pem"));
  rt::make_cluster_pki(dir, "t", true);  // a new CA
  auto id = rt::tls_files(dir, "node");
  id.cert = s.path + "/old-node.pem";
  auto why = refusal(id);
  BOOST_TEST((why.find("does not match") != std::string::npos || why.find("does not verify") != std::string::npos),
             why);
}

BOOST_AUTO_TEST_CASE(a_wrong_identity_is_refused_naming_the_file) {
  scratch s;
  auto a = s.path + "/a", b = s.path + "/b";
  rt::make_cluster_pki(a, "a");
  rt::make_cluster_pki(b, "b");
  // Missing file.
  auto missing = rt::tls_files(a, "node");
  missing.cert = s.path + "/nope.pem";
  BOOST_TEST(refusal(missing).find("nope.pem does not exist") != std::string::npos, refusal(missing));
  // Key of another role: does not match the certificate.
  auto mismatch = rt::tls_files(a, "node");
  mismatch.key = a + "/admin.key";
  BOOST_TEST(refusal(mismatch).find("does not match") != std::string::npos, refusal(mismatch));
  // Certificate of another cluster's CA.
  auto foreign = rt::tls_files(a, "node");
  foreign.cert = b + "/node.pem";
  foreign.key = b + "/node.key";
  BOOST_TEST(refusal(foreign).find("does not verify against") != std::string::npos, refusal(foreign));
  // A key others can read.
  auto open = rt::tls_files(a, "client");
  ::chmod(open.key.c_str(), 0644);
  BOOST_TEST(refusal(open).find("readable by group or others") != std::string::npos, refusal(open));
  // Not PEM at all.
  auto garbage = rt::tls_files(a, "admin");
  std::ofstream(s.path + "/garbage.pem") << "not a certificate\n";
  garbage.cert = s.path + "/garbage.pem";
  BOOST_TEST(refusal(garbage).find("is not a PEM certificate") != std::string::npos, refusal(garbage));
  // Renewing a directory whose CA key is gone is refused, not silently replaced.
  fs::remove(a + "/ca.key");
  try {
    rt::make_cluster_pki(a, "a");
    BOOST_ERROR("renewing without ca.key must fail");
  } catch (const std::exception& e) {
    BOOST_TEST(std::string(e.what()).find("ca.key does not") != std::string::npos, e.what());
  }
}
