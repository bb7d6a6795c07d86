// SHA-256 (FIPS 180-4), for the integrity digests of checkpoint tensors (checkpoint.h records each
// tensor's digest in metadata.json and checks it on load), computed by OpenSSL's libcrypto (EVP),
// which uses the CPU's SHA extensions where it has them. Streaming: Update() any number of times,
// then Finish(). Not thread-safe per object; separate objects are independent, so tensors can be
// hashed on several threads at once.
#ifndef MT_CHECKPOINT_SHA256_H_
#define MT_CHECKPOINT_SHA256_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

// The digests of several buffers, computed on worker threads of its own while the caller produces
// or consumes the bytes: a file's tensors hashed while they are written from memory, or while
// they are read into memory. The buffers are taken in order, each by one worker, which hashes its
// bytes in order as far as they are ready: buffers [0, i) whole and the first `bytes` of buffer i
// once MarkReady(i, bytes) has said so (MarkAllReady: everything at once). A reader reports each
// piece it has read; the workers hash behind it.
//
//   Sha256Workers workers({{a, na}, {b, nb}}, /*threads=*/2);
//   ... read a in pieces, workers.MarkReady(0, bytes_so_far) after each, then b ...
//   workers.MarkAllReady();
//   std::vector<std::string> hex = workers.Finish();   // Sha256Hex of a and of b
//
// Destroying it without Finish() stops the workers (after the piece each is hashing). MarkReady,
// MarkAllReady and Finish are for one thread (the producer's).
class Sha256Workers {
 public:
  struct Buffer {
    const void* data;
    size_t size;
  };
  // Starts min(threads, buffers) >= 1 workers (threads >= 1).
  Sha256Workers(std::vector<Buffer> buffers, int threads);
  ~Sha256Workers();
  Sha256Workers(const Sha256Workers&) = delete;
  Sha256Workers& operator=(const Sha256Workers&) = delete;

  // Buffers [0, index) are whole and the first `bytes` of buffer `index` are ready. Never moves
  // back.
  void MarkReady(size_t index, size_t bytes);
  void MarkAllReady() { MarkReady(buffers_.size(), 0); }
  // Every buffer's lowercase hex digest, in order, once the workers are done. Call after
  // MarkAllReady(), once.
  std::vector<std::string> Finish();

  // A sensible number of workers for hashing beside one thread doing I/O: the machine's hardware
  // threads, at least 1 and at most 4.
  static int DefaultThreads();

 private:
  void Work();
  // Bytes of buffer i that are ready. Requires mu_.
  size_t ReadyLocked(size_t i) const;

  const std::vector<Buffer> buffers_;
  std::vector<std::string> digests_;  // Written by the worker of each buffer.
  std::atomic<size_t> next_{0};       // The next buffer a worker takes.
  std::mutex mu_;
  std::condition_variable ready_cv_;
  size_t ready_index_ = 0;  // Guarded by mu_.
  size_t ready_bytes_ = 0;  // Guarded by mu_.
  bool stop_ = false;       // Guarded by mu_.
  std::vector<std::thread> threads_;
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
