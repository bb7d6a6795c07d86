// Sha256 over OpenSSL's EVP digest interface. Failures of libcrypto here (out of memory, a
// provider without SHA-256) are not something a caller could handle: they end the process.
#include "checkpoint/sha256.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"
#include "openssl/evp.h"

namespace mt {
namespace checkpoint {

void Sha256::FreeContext::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  CHECK(ctx_ != nullptr) << "EVP_MD_CTX_new failed";
  CHECK_EQ(EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr), 1) << "SHA-256 unavailable";
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(const void* data, size_t n) {
  if (n == 0) return;
  CHECK_EQ(EVP_DigestUpdate(ctx_.get(), data, n), 1) << "EVP_DigestUpdate failed";
}

Sha256::Digest Sha256::Finish() {
  Digest digest;
  unsigned int size = 0;
  CHECK_EQ(EVP_DigestFinal_ex(ctx_.get(), digest.data(), &size), 1) << "EVP_DigestFinal_ex failed";
  CHECK_EQ(size, digest.size());
  return digest;
}

std::string DigestHex(const Sha256::Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

std::string Sha256Hex(const void* data, size_t n) {
  Sha256 h;
  h.Update(data, n);
  return DigestHex(h.Finish());
}

bool IsSha256Hex(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace checkpoint
}  // namespace mt
