// The integrity digests of several buffers (checkpoint.h: each tensor's SHA-256 and CRC32C),
// computed on worker threads of their own while the caller produces or consumes the bytes: a
// file's tensors hashed while they are written from memory, or while they are read into memory.
#ifndef MT_CHECKPOINT_DIGEST_WORKERS_H_
#define MT_CHECKPOINT_DIGEST_WORKERS_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mt {
namespace checkpoint {

// One buffer's digests: the lowercase hex SHA-256 (Sha256Hex; empty when not asked for) and the
// CRC32C (core/crc32c.h; 0 when not asked for).
struct TensorDigests {
  std::string sha256;
  uint32_t crc32c = 0;
};

// The buffers are taken in order, each by one worker, which digests its bytes in order as far as
// they are ready: buffers [0, i) whole and the first `bytes` of buffer i once MarkReady(i, bytes)
// has said so (MarkAllReady: everything at once). A reader reports each piece it has read; the
// workers digest behind it. A buffer asking for both digests is fed to the two in pieces of
// kPiece bytes, so the CRC32C reads each piece from the cache the SHA-256 has just brought it to.
//
//   DigestWorkers workers({{a, na, /*sha256=*/true, /*crc32c=*/true}, {b, nb, true, true}}, 2);
//   ... read a in pieces, workers.MarkReady(0, bytes_so_far) after each, then b ...
//   workers.MarkAllReady();
//   std::vector<TensorDigests> digests = workers.Finish();   // of a and of b
//
// Destroying it without Finish() stops the workers (after the piece each is digesting).
// MarkReady, MarkAllReady and Finish are for one thread (the producer's).
class DigestWorkers {
 public:
  struct Buffer {
    const void* data;
    size_t size;
    bool sha256 = true;   // Compute its SHA-256.
    bool crc32c = false;  // Compute its CRC32C.
  };
  static constexpr size_t kPiece = size_t{256} << 10;

  // Starts min(threads, buffers) >= 1 workers (threads >= 1).
  DigestWorkers(std::vector<Buffer> buffers, int threads);
  ~DigestWorkers();
  DigestWorkers(const DigestWorkers&) = delete;
  DigestWorkers& operator=(const DigestWorkers&) = delete;

  // Buffers [0, index) are whole and the first `bytes` of buffer `index` are ready. Never moves
  // back.
  void MarkReady(size_t index, size_t bytes);
  void MarkAllReady() { MarkReady(buffers_.size(), 0); }
  // Every buffer's digests, in order, once the workers are done. Call after MarkAllReady(), once.
  std::vector<TensorDigests> Finish();

  // A sensible number of workers for SHA-256 beside one thread doing I/O: the machine's hardware
  // threads, at least 1 and at most 4. (CRC32C runs at several GB/s on one core: one worker
  // keeps up with a disk.)
  static int DefaultThreads();

 private:
  void Work();
  // Bytes of buffer i that are ready. Requires mu_.
  size_t ReadyLocked(size_t i) const;

  const std::vector<Buffer> buffers_;
  std::vector<TensorDigests> digests_;  // Written by the worker of each buffer.
  std::atomic<size_t> next_{0};         // The next buffer a worker takes.
  std::mutex mu_;
  std::condition_variable ready_cv_;
  size_t ready_index_ = 0;  // Guarded by mu_.
  size_t ready_bytes_ = 0;  // Guarded by mu_.
  bool stop_ = false;       // Guarded by mu_.
  std::vector<std::thread> threads_;
};

// Both digests of n bytes, in one pass of kPiece-byte pieces (what DigestWorkers computes for a
// buffer asking for both).
TensorDigests Digest(const void* data, size_t n, bool sha256, bool crc32c);

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_DIGEST_WORKERS_H_
