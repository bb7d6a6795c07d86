#include "checkpoint/digest_workers.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "checkpoint/sha256.h"
#include "core/crc32c.h"
#include "glog/logging.h"

namespace mt {
namespace checkpoint {
namespace {

// The running digests of one buffer.
class Digester {
 public:
  Digester(bool sha256, bool crc32c) : crc32c_(crc32c) {
    if (sha256) sha256_.emplace();
  }
  // Appends n bytes, piece by piece: each piece is still in the cache when the CRC reads it after
  // the SHA-256 (a piece's SHA-256 takes long enough that nothing is gained by the reverse order).
  void Update(const char* data, size_t n) {
    for (size_t at = 0; at < n; at += DigestWorkers::kPiece) {
      const size_t piece = std::min(DigestWorkers::kPiece, n - at);
      if (sha256_.has_value()) sha256_->Update(data + at, piece);
      if (crc32c_) crc_ = Crc32cExtend(crc_, data + at, piece);
    }
  }
  TensorDigests Finish() {
    TensorDigests d;
    if (sha256_.has_value()) d.sha256 = DigestHex(sha256_->Finish());
    d.crc32c = crc_;
    return d;
  }

 private:
  std::optional<Sha256> sha256_;
  bool crc32c_;
  uint32_t crc_ = 0;
};

}  // namespace

TensorDigests Digest(const void* data, size_t n, bool sha256, bool crc32c) {
  Digester d(sha256, crc32c);
  d.Update(static_cast<const char*>(data), n);
  return d.Finish();
}

DigestWorkers::DigestWorkers(std::vector<Buffer> buffers, int threads)
    : buffers_(std::move(buffers)), digests_(buffers_.size()) {
  CHECK_GE(threads, 1);
  const size_t n = std::max<size_t>(1, std::min<size_t>(threads, buffers_.size()));
  threads_.reserve(n);
  for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
}

DigestWorkers::~DigestWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  ready_cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

int DigestWorkers::DefaultThreads() {
  return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 4));
}

size_t DigestWorkers::ReadyLocked(size_t i) const {
  if (i < ready_index_) return buffers_[i].size;
  return i == ready_index_ ? ready_bytes_ : 0;
}

void DigestWorkers::MarkReady(size_t index, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(index > ready_index_ || (index == ready_index_ && bytes >= ready_bytes_))
        << "DigestWorkers::MarkReady moved back";
    CHECK(index < buffers_.size() ? bytes <= buffers_[index].size : bytes == 0);
    ready_index_ = index;
    ready_bytes_ = bytes;
  }
  ready_cv_.notify_all();
}

void DigestWorkers::Work() {
  for (;;) {
    const size_t i = next_.fetch_add(1);
    if (i >= buffers_.size()) return;
    const Buffer& b = buffers_[i];
    const char* data = static_cast<const char*>(b.data);
    Digester digester(b.sha256, b.crc32c);
    size_t done = 0;
    while (done < b.size) {
      size_t ready;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_cv_.wait(lock, [&] { return stop_ || ReadyLocked(i) > done; });
        if (stop_) return;
        ready = ReadyLocked(i);
      }
      digester.Update(data + done, ready - done);
      done = ready;
    }
    digests_[i] = digester.Finish();
  }
}

std::vector<TensorDigests> DigestWorkers::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK_EQ(ready_index_, buffers_.size()) << "DigestWorkers::Finish before MarkAllReady";
  }
  for (std::thread& t : threads_) t.join();
  return std::move(digests_);
}

}  // namespace checkpoint
}  // namespace mt
