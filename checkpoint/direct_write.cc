#include "checkpoint/direct_write.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "checkpoint/direct_staging.h"
#include "core/status.h"

namespace mt {
namespace checkpoint {
namespace internal {
namespace {

// The staging ring: the producer fills piece p into slot p % kSlots once piece p - kSlots has
// been written, and submits it; the I/O threads write the submitted pieces.
class PieceWriter {
 public:
  PieceWriter(DirectWritableFile& file, size_t piece_bytes)
      : file_(file),
        piece_bytes_(piece_bytes),
        memory_(AllocateStaging(piece_bytes, file.alignment())),
        lengths_(kSlots, 0) {
    for (int t = 0; t < kIoThreads; ++t) threads_.emplace_back([this] { Work(); });
  }
  ~PieceWriter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Copies n bytes into the ring, submitting each slot it fills.
  absl::Status Append(const char* data, size_t n) {
    while (n > 0) {
      if (fill_ == 0) RETURN_IF_ERROR(WaitForSlot());
      const size_t take = std::min(n, piece_bytes_ - fill_);
      std::memcpy(Slot(submitted_) + fill_, data, take);
      fill_ += take;
      data += take;
      n -= take;
      if (fill_ == piece_bytes_) Submit(piece_bytes_);
    }
    return absl::OkStatus();
  }

  // Submits the last slot, padded with zeros to the alignment, and waits for every write.
  absl::Status Finish() {
    if (fill_ > 0) {
      const size_t padded = AlignUp(fill_, file_.alignment());
      std::memset(Slot(submitted_) + fill_, 0, padded - fill_);
      Submit(padded);
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !status_.ok() || written_ == submitted_; });
    return status_;
  }

 private:
  char* Slot(size_t piece) const { return memory_.get() + (piece % kSlots) * piece_bytes_; }

  // Waits until the slot of the next piece is free (its previous piece written).
  absl::Status WaitForSlot() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !status_.ok() || written_ + kSlots > submitted_; });
    return status_;
  }

  void Submit(size_t length) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      lengths_[submitted_ % kSlots] = length;
      ++submitted_;
    }
    fill_ = 0;
    cv_.notify_all();
  }

  void Work() {
    for (;;) {
      size_t p, length;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closing_ || !status_.ok() || next_ < submitted_; });
        if (!status_.ok() || next_ >= submitted_) return;
        p = next_++;
        length = lengths_[p % kSlots];
      }
      const absl::Status s = file_.Write(uint64_t{p} * piece_bytes_, length, Slot(p));
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!s.ok() && status_.ok()) status_ = s;
        done_.push_back(p);
        // written_: the pieces written without a gap from the first, so that slots free in order.
        std::sort(done_.begin(), done_.end());
        while (!done_.empty() && done_.front() == written_) {
          done_.erase(done_.begin());
          ++written_;
        }
      }
      cv_.notify_all();
    }
  }

  DirectWritableFile& file_;
  const size_t piece_bytes_;
  StagingMemory memory_;
  size_t fill_ = 0;  // Bytes in the slot being filled (the producer's).
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<size_t> lengths_;  // Guarded by mu_: each slot's submitted length.
  size_t submitted_ = 0;         // Guarded by mu_.
  size_t next_ = 0;              // Guarded by mu_: the next piece an I/O thread takes.
  size_t written_ = 0;           // Guarded by mu_.
  std::vector<size_t> done_;     // Guarded by mu_: written pieces beyond written_.
  bool closing_ = false;         // Guarded by mu_.
  absl::Status status_;          // Guarded by mu_: the first failed write.
  std::vector<std::thread> threads_;
};

}  // namespace

absl::Status WriteDirect(DirectWritableFile& file, const std::vector<WritePart>& parts, Sync sync) {
  const size_t piece_bytes = AlignUp(kPieceBytes, file.alignment());
  uint64_t size = 0;
  {
    PieceWriter writer(file, piece_bytes);
    for (const WritePart& part : parts) {
      RETURN_IF_ERROR(writer.Append(static_cast<const char*>(part.data), part.size));
      size += part.size;
    }
    RETURN_IF_ERROR(writer.Finish());
  }
  return file.Close(size, sync);
}

}  // namespace internal
}  // namespace checkpoint
}  // namespace mt
