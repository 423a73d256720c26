#include "runtime/ucx_seal.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace dls::runtime {

namespace {

constexpr std::string_view label = "dilaserve ucx part v1";
constexpr int iv_bytes = 12;  // GCM's own size; all zero, since every part has a key of its own
constexpr int tag_bytes = 16;

struct part_key {
  unsigned char bytes[32];
};

// HMAC-SHA256(cluster key, label || salt || receiver): a key per part, bound to its receiver.
bool derive(std::string_view key, std::string_view receiver, const uint8_t (&salt)[16], part_key& out) {
  std::string input;
  input.reserve(label.size() + sizeof salt + receiver.size());
  input.append(label);
  input.append(reinterpret_cast<const char*>(salt), sizeof salt);
  input.append(receiver);
  unsigned int n = 0;
  return HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(input.data()),
              input.size(), out.bytes, &n) != nullptr &&
         n == sizeof out.bytes;
}

using cipher_ctx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

// The header as authenticated data: itself with the tag zeroed (the tag cannot cover itself).
ucx_frame_header aad_of(const ucx_frame_header& h) {
  ucx_frame_header a = h;
  std::memset(a.tag, 0, sizeof a.tag);
  return a;
}

// EVP's lengths are ints: a part larger than INT_MAX goes through in slices.
template <class Update>
bool in_slices(Update update, const char* in, char* out, uint64_t n) {
  while (n > 0) {
    const int slice = static_cast<int>(std::min<uint64_t>(n, INT_MAX / 2));
    int written = 0;
    if (update(reinterpret_cast<unsigned char*>(out), &written, reinterpret_cast<const unsigned char*>(in), slice) != 1 ||
        written != slice)
      return false;
    in += slice;
    out += slice;
    n -= static_cast<uint64_t>(slice);
  }
  return true;
}

}  // namespace

std::string make_seal_key() {
  std::string key(ucx_seal_key_bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1)
    throw std::runtime_error("no random bytes for the data-plane key (OpenSSL's RAND_bytes failed)");
  return key;
}

void seal_part(std::string_view key, std::string_view receiver, ucx_frame_header& h, const char* in, char* out) {
  h.sealed = 1;
  h.checksum = 0;
  std::memset(h.tag, 0, sizeof h.tag);
  if (RAND_bytes(h.salt, sizeof h.salt) != 1) throw std::runtime_error("no random bytes for a part's salt");
  part_key k;
  if (!derive(key, receiver, h.salt, k)) throw std::runtime_error("cannot derive a part's key (HMAC-SHA256 failed)");
  cipher_ctx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  const unsigned char iv[iv_bytes] = {};
  const auto aad = aad_of(h);
  int n = 0;
  unsigned char last[16];
  const bool ok = ctx && EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, k.bytes, iv) == 1 &&
                  EVP_EncryptUpdate(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(&aad), sizeof aad) == 1 &&
                  in_slices([&](unsigned char* o, int* w, const unsigned char* i,
                                int len) { return EVP_EncryptUpdate(ctx.get(), o, w, i, len); },
                            in, out, h.bytes) &&
                  EVP_EncryptFinal_ex(ctx.get(), last, &n) == 1 && n == 0 &&
                  EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, tag_bytes, h.tag) == 1;
  std::memset(&k, 0, sizeof k);
  if (!ok) throw std::runtime_error("cannot seal a data-plane part (AES-256-GCM failed)");
}

std::string open_part(std::string_view key, std::string_view receiver, const ucx_frame_header& h, char* data) {
  part_key k;
  if (!derive(key, receiver, h.salt, k)) return "ucx transfer " + std::to_string(h.transfer_id) + ": cannot derive a part's key";
  cipher_ctx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  const unsigned char iv[iv_bytes] = {};
  const auto aad = aad_of(h);
  unsigned char tag[tag_bytes];
  std::memcpy(tag, h.tag, sizeof tag);
  int n = 0;
  unsigned char last[16];
  const bool set_up = ctx && EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, k.bytes, iv) == 1 &&
                      EVP_DecryptUpdate(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(&aad), sizeof aad) == 1 &&
                      in_slices([&](unsigned char* o, int* w, const unsigned char* i,
                                    int len) { return EVP_DecryptUpdate(ctx.get(), o, w, i, len); },
                                data, data, h.bytes) &&
                      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, tag_bytes, tag) == 1;
  std::memset(&k, 0, sizeof k);
  if (set_up && EVP_DecryptFinal_ex(ctx.get(), last, &n) == 1) return {};
  return "ucx transfer " + std::to_string(h.transfer_id) + " refused: " +
         (h.parts > 1 ? "part " + std::to_string(h.part) + " (" + std::to_string(h.bytes) + " bytes)" :
                        std::to_string(h.bytes) + " bytes") +
         " did not authenticate (forged, corrupt, or sealed under another cluster's key)";
}

std::string check_frame_sealing(const ucx_frame_header& h, bool sealed_wanted) {
  if ((h.sealed != 0) == sealed_wanted) return {};
  const auto id = "ucx transfer " + std::to_string(h.transfer_id) + " refused: ";
  return sealed_wanted ? id + "sent in the clear, and this node takes only sealed transfers (ucx.encrypt: true)"
                       : id + "sealed, and this node runs without the data-plane key (ucx.encrypt: false)";
}

}  // namespace dls::runtime
