// SHA-256 (FIPS 180-4), for the integrity digests of checkpoint tensors (checkpoint.h records each
// tensor's digest in metadata.json and checks it on load), computed by OpenSSL's libcrypto (EVP),
// which uses the CPU's SHA extensions where it has them. Streaming: Update() any number of times,
// then Finish(). Not thread-safe per object; separate objects are independent, so tensors can be
// hashed on several threads at once (checkpoint/digest_workers.h).
#ifndef MT_CHECKPOINT_SHA256_H_
#define MT_CHECKPOINT_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX.

namespace mt {
namespace checkpoint {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  // Appends n bytes (n may be 0; data may then be null).
  void Update(const void* data, size_t n);
  void Update(absl::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // The digest of everything appended; the object must not be used afterwards (reset by
  // assigning a new Sha256).
  Digest Finish();

 private:
  struct FreeContext {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, FreeContext> ctx_;
};

// The lowercase hexadecimal digest of `n` bytes, as sha256sum prints it (64 characters).
std::string Sha256Hex(const void* data, size_t n);
inline std::string Sha256Hex(absl::string_view bytes) {
  return Sha256Hex(bytes.data(), bytes.size());
}
// Lowercase hex of a digest.
std::string DigestHex(const Sha256::Digest& digest);
// Whether `s` looks like a Sha256Hex result: 64 characters of [0-9a-f].
bool IsSha256Hex(absl::string_view s);

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_SHA256_H_
