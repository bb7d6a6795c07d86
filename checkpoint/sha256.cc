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

Sha256Workers::Sha256Workers(std::vector<Buffer> buffers, int threads)
    : buffers_(std::move(buffers)), digests_(buffers_.size()) {
  CHECK_GE(threads, 1);
  const size_t n = std::max<size_t>(1, std::min<size_t>(threads, buffers_.size()));
  threads_.reserve(n);
  for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
}

Sha256Workers::~Sha256Workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  ready_cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

int Sha256Workers::DefaultThreads() {
  return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 4));
}

size_t Sha256Workers::ReadyLocked(size_t i) const {
  if (i < ready_index_) return buffers_[i].size;
  return i == ready_index_ ? ready_bytes_ : 0;
}

void Sha256Workers::MarkReady(size_t index, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(index > ready_index_ || (index == ready_index_ && bytes >= ready_bytes_))
        << "Sha256Workers::MarkReady moved back";
    CHECK(index < buffers_.size() ? bytes <= buffers_[index].size : bytes == 0);
    ready_index_ = index;
    ready_bytes_ = bytes;
  }
  ready_cv_.notify_all();
}

void Sha256Workers::Work() {
  for (;;) {
    const size_t i = next_.fetch_add(1);
    if (i >= buffers_.size()) return;
    const char* data = static_cast<const char*>(buffers_[i].data);
    const size_t size = buffers_[i].size;
    Sha256 h;
    size_t done = 0;
    while (done < size) {
      size_t ready;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_cv_.wait(lock, [&] { return stop_ || ReadyLocked(i) > done; });
        if (stop_) return;
        ready = ReadyLocked(i);
      }
      h.Update(data + done, ready - done);
      done = ready;
    }
    digests_[i] = DigestHex(h.Finish());
  }
}

std::vector<std::string> Sha256Workers::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK_EQ(ready_index_, buffers_.size()) << "Sha256Workers::Finish before MarkAllReady";
  }
  for (std::thread& t : threads_) t.join();
  return std::move(digests_);
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
