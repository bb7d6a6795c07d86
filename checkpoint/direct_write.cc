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

// The file systems' block (ext4's and XFS's by default): in-place writes start and end on one.
constexpr uint64_t kBlockBytes = 4096;

// The staging ring and the I/O threads. The producer copies bytes, in file order, into the staging
// slots (slot s % kSlots once the write of the slot's previous piece is done) and submits each full
// slot; the aligned interiors of parts that align like the file are submitted as writes straight
// from their memory. The I/O threads take the submitted writes in order.
class PieceWriter {
 public:
  PieceWriter(DirectWritableFile& file, size_t piece_bytes)
      : file_(file),
        piece_bytes_(piece_bytes),
        memory_(AllocateStaging(piece_bytes, file.alignment())),
        slot_busy_(kSlots, false) {
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

  // Appends n bytes to the file: the interior between file-system blocks in place where `data`
  // and the file offset agree modulo the alignment, the rest copied into the ring. Every write
  // starts on a block: ext4 serialises direct writes that do not (and zeroes their partial
  // blocks), which made in-place writes at 1 KiB offsets slower than staged ones.
  absl::Status Append(const char* data, size_t n) {
    const uint64_t align = file_.alignment();
    const uint64_t block = std::max<uint64_t>(align, kBlockBytes);
    const uint64_t at = Position();
    uint64_t begin = 0, end = 0;
    if (!InPlaceInterior(data, at, n, align, block, &begin, &end)) return Copy(data, n);
    RETURN_IF_ERROR(Copy(data, begin - at));
    if (fill_ > 0) Submit(nullptr, fill_);  // Ends at `begin`, aligned.
    for (uint64_t o = begin; o < end; o += piece_bytes_) {
      const size_t length = static_cast<size_t>(std::min<uint64_t>(piece_bytes_, end - o));
      Submit(data + (o - at), length);
    }
    return Copy(data + (end - at), at + n - end);
  }

  // Submits the last slot, padded with zeros to the alignment, and waits for every write.
  absl::Status Finish() {
    if (fill_ > 0) {
      const size_t padded = AlignUp(fill_, file_.alignment());
      std::memset(Slot(slot_) + fill_, 0, padded - fill_);
      Submit(nullptr, padded);
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !status_.ok() || written_ == jobs_.size(); });
    return status_;
  }

 private:
  static constexpr size_t kNoSlot = SIZE_MAX;
  struct Job {
    uint64_t offset = 0;
    size_t length = 0;
    const char* src = nullptr;
    size_t slot = kNoSlot;  // The staging slot it frees when written, if any.
  };

  char* Slot(size_t s) const { return memory_.get() + (s % kSlots) * piece_bytes_; }
  uint64_t Position() const { return offset_ + fill_; }

  // Copies n bytes into the ring, submitting each slot it fills.
  absl::Status Copy(const char* data, size_t n) {
    while (n > 0) {
      if (fill_ == 0) RETURN_IF_ERROR(WaitForSlot());
      const size_t take = std::min(n, piece_bytes_ - fill_);
      std::memcpy(Slot(slot_) + fill_, data, take);
      fill_ += take;
      data += take;
      n -= take;
      if (fill_ == piece_bytes_) Submit(nullptr, piece_bytes_);
    }
    return absl::OkStatus();
  }

  // Waits until the next slot is free (its previous piece written) and takes it.
  absl::Status WaitForSlot() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !status_.ok() || !slot_busy_[slot_ % kSlots]; });
    slot_busy_[slot_ % kSlots] = true;
    return status_;
  }

  // Submits the write of `length` bytes from `src`, or (null) from the slot being filled, at the
  // offset that comes next.
  void Submit(const char* src, size_t length) {
    Job job{offset_, length, src, kNoSlot};
    if (src == nullptr) {
      job.src = Slot(slot_);
      job.slot = slot_ % kSlots;
      ++slot_;
      offset_ += fill_;
      fill_ = 0;
    } else {
      offset_ += length;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(job);
    }
    cv_.notify_all();
  }

  void Work() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closing_ || !status_.ok() || next_ < jobs_.size(); });
        if (!status_.ok() || next_ >= jobs_.size()) return;
        job = jobs_[next_++];
      }
      const absl::Status s = file_.Write(job.offset, job.length, job.src);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!s.ok() && status_.ok()) status_ = s;
        if (job.slot != kNoSlot) slot_busy_[job.slot] = false;
        ++written_;
      }
      cv_.notify_all();
    }
  }

  DirectWritableFile& file_;
  const size_t piece_bytes_;
  StagingMemory memory_;
  // The producer's: the file offset of the slot being filled (or of the next write), the slot and
  // how many bytes it holds.
  uint64_t offset_ = 0;
  size_t slot_ = 0;
  size_t fill_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> slot_busy_;  // Guarded by mu_: taken by the producer, freed once written.
  std::vector<Job> jobs_;        // Guarded by mu_: every write submitted, in order.
  size_t next_ = 0;              // Guarded by mu_: the next job an I/O thread takes.
  size_t written_ = 0;           // Guarded by mu_: jobs done.
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
