#include "runtime/pki.hpp"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>

namespace fs = std::filesystem;

namespace dls::runtime {

namespace {

// Ten years for the CA, about two for the role certificates (the CA/Browser Forum's old
// 825-day ceiling): `dilaserve certs --renew` issues new ones from the same CA.
constexpr long ca_lifetime_s = 10L * 365 * 24 * 3600;
constexpr long leaf_lifetime_s = 825L * 24 * 3600;

struct bio_free { void operator()(BIO* b) const { BIO_free(b); } };
struct key_free { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
struct x509_free { void operator()(X509* x) const { X509_free(x); } };
struct store_free { void operator()(X509_STORE* s) const { X509_STORE_free(s); } };
struct store_ctx_free { void operator()(X509_STORE_CTX* s) const { X509_STORE_CTX_free(s); } };
using bio_ptr = std::unique_ptr<BIO, bio_free>;
using key_ptr = std::unique_ptr<EVP_PKEY, key_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;

[[noreturn]] void fail(const std::string& what) {
  unsigned long e = ERR_get_error();
  std::string detail;
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    detail = std::string(" (") + buf + ")";
  }
  ERR_clear_error();
  throw std::runtime_error(what + detail);
}

key_ptr new_key() {
  key_ptr k(EVP_EC_gen("P-256"));
  if (!k) fail("cannot generate an EC P-256 key");
  return k;
}

void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext || !X509_add_ext(cert, ext, -1)) fail(std::string("cannot add certificate extension ") + value);
  X509_EXTENSION_free(ext);
}

x509_ptr new_cert(EVP_PKEY* key, const std::string& cn, long lifetime_s) {
  x509_ptr x(X509_new());
  if (!x) fail("cannot allocate a certificate");
  X509_set_version(x.get(), 2);
  // A random 127-bit serial, as RFC 5280 asks for at most 20 octets and positive.
  BIGNUM* bn = BN_new();
  if (!bn || !BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
      !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x.get()))) {
    BN_free(bn);
    fail("cannot draw a certificate serial number");
  }
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -300);  // tolerate small clock skew between hosts
  X509_gmtime_adj(X509_getm_notAfter(x.get()), lifetime_s);
  X509_set_pubkey(x.get(), key);
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("DiLaServe"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return x;
}

std::string pem_of(X509* x) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b || !PEM_write_bio_X509(b.get(), x)) fail("cannot encode a certificate");
  char* data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

std::string pem_of(EVP_PKEY* k) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b || !PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr)) fail("cannot encode a key");
  char* data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

x509_ptr read_cert(const std::string& path) {
  bio_ptr b(BIO_new_file(path.c_str(), "r"));
  if (!b) fail("cannot read certificate " + path);
  x509_ptr x(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!x) fail(path + " is not a PEM certificate");
  return x;
}

key_ptr read_key(const std::string& path) {
  bio_ptr b(BIO_new_file(path.c_str(), "r"));
  if (!b) fail("cannot read key " + path);
  key_ptr k(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
  if (!k) fail(path + " is not a PEM private key");
  return k;
}

void issue(const std::string& dir, const std::string& role, const std::string& cluster, X509* ca, EVP_PKEY* ca_key) {
  auto key = new_key();
  auto cert = new_cert(key.get(), "dilaserve-" + role + "." + cluster, leaf_lifetime_s);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca));
  add_ext(cert.get(), ca, NID_basic_constraints, "critical,CA:FALSE");
  add_ext(cert.get(), ca, NID_key_usage, "critical,digitalSignature,keyAgreement");
  // Only the head serves TLS; every other role only connects to it.
  add_ext(cert.get(), ca, NID_ext_key_usage, role == "head" ? "serverAuth" : "clientAuth");
  if (!X509_sign(cert.get(), ca_key, EVP_sha256())) fail("cannot sign the " + role + " certificate");
  auto id = tls_files(dir, role);
  write_private_file(id.key, pem_of(key.get()), 0600);
  write_private_file(id.cert, pem_of(cert.get()), 0644);
}

}  // namespace

tls_identity tls_files(const std::string& dir, const std::string& role) {
  auto d = fs::path(dir);
  return {(d / "ca.pem").string(), (d / (role + ".pem")).string(), (d / (role + ".key")).string()};
}

bool pki_complete(const std::string& dir) {
  for (const char* role : pki_roles) {
    auto id = tls_files(dir, role);
    if (!fs::exists(id.ca) || !fs::exists(id.cert) || !fs::exists(id.key)) return false;
  }
  return true;
}

void write_private_file(const std::string& path, const std::string& text, unsigned mode) {
  auto tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) throw std::runtime_error("cannot create " + tmp);
  ::fchmod(fd, static_cast<mode_t>(mode));  // the umask may have taken bits away
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write " + tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

void make_cluster_pki(const std::string& dir, const std::string& cluster, bool replace) {
  auto ca_path = (fs::path(dir) / "ca.pem").string();
  auto ca_key_path = (fs::path(dir) / "ca.key").string();
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  x509_ptr ca;
  key_ptr ca_key;
  if (fs::exists(ca_path) && !replace) {
    // Renewing role certificates keeps the CA, so certificates already copied to other
    // hosts stay valid.
    if (!fs::exists(ca_key_path))
      throw std::runtime_error(ca_path + " exists but its key " + ca_key_path +
                               " does not: cannot issue certificates (use --replace-ca for a new CA)");
    ca = read_cert(ca_path);
    ca_key = read_key(ca_key_path);
  } else {
    ca_key = new_key();
    ca = new_cert(ca_key.get(), "DiLaServe CA for cluster " + cluster, ca_lifetime_s);
    X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get()));
    add_ext(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    add_ext(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
    add_ext(ca.get(), ca.get(), NID_subject_key_identifier, "hash");
    if (!X509_sign(ca.get(), ca_key.get(), EVP_sha256())) fail("cannot self-sign the cluster CA");
    write_private_file(ca_key_path, pem_of(ca_key.get()), 0600);
    write_private_file(ca_path, pem_of(ca.get()), 0644);
  }
  for (const char* role : pki_roles) issue(dir, role, cluster, ca.get(), ca_key.get());
}

void check_tls_identity(const tls_identity& id) {
  for (const auto* p : {&id.ca, &id.cert, &id.key})
    if (!fs::exists(*p)) throw std::runtime_error("TLS file " + *p + " does not exist (run `dilaserve certs`)");
  struct stat sb{};
  if (::stat(id.key.c_str(), &sb) == 0 && (sb.st_mode & 077) != 0)
    throw std::runtime_error("TLS key " + id.key + " is readable by group or others (chmod 600 it)");
  auto ca = read_cert(id.ca);
  auto cert = read_cert(id.cert);
  auto key = read_key(id.key);
  if (X509_check_private_key(cert.get(), key.get()) != 1) fail("TLS key " + id.key + " does not match " + id.cert);
  std::unique_ptr<X509_STORE, store_free> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, store_ctx_free> ctx(X509_STORE_CTX_new());
  if (!store || !ctx || !X509_STORE_add_cert(store.get(), ca.get()) ||
      !X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr))
    fail("cannot set up certificate verification");
  if (X509_verify_cert(ctx.get()) != 1)
    throw std::runtime_error("TLS certificate " + id.cert + " does not verify against " + id.ca + ": " +
                             X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
}

}  // namespace dls::runtime
