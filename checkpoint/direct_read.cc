#include "checkpoint/direct_read.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/direct_staging.h"

namespace mt {
namespace checkpoint {
namespace internal {
namespace {

constexpr uint64_t kMergeGap = uint64_t{1} << 20;  // Read through gaps up to this between spans.
constexpr size_t kStaged = SIZE_MAX;

// An aligned piece of the file and how much of it the spans need.
struct Piece {
  uint64_t offset = 0;
  size_t length = 0;
  uint64_t needed_end = 0;  // The file must reach here (the end of the piece's run of spans).
  size_t span = kStaged;    // The span it is read straight into, or kStaged: a staging buffer.
};

// [begin, end) cut into pieces of `piece` bytes.
void AddPieces(uint64_t begin, uint64_t end, size_t piece, uint64_t needed_end, size_t span,
               std::vector<Piece>* pieces) {
  for (uint64_t o = begin; o < end; o += piece) {
    pieces->push_back(
        {o, static_cast<size_t>(std::min<uint64_t>(piece, end - o)), needed_end, span});
  }
}

// Runs of spans (neighbours closer than kMergeGap) cut into pieces of `piece` bytes on aligned
// boundaries, in file order: the in-place interiors of spans, and the bytes around them staged.
std::vector<Piece> PlanPieces(const std::vector<ReadSpan>& spans, uint64_t align, size_t piece) {
  std::vector<Piece> pieces;
  size_t i = 0;
  while (i < spans.size()) {
    if (spans[i].size == 0) {
      ++i;
      continue;
    }
    const size_t first = i;
    const uint64_t run_begin = spans[i].offset;
    uint64_t run_end = run_begin + spans[i].size;
    for (++i; i < spans.size() && (spans[i].size == 0 || spans[i].offset <= run_end + kMergeGap);
         ++i) {
      run_end = std::max<uint64_t>(run_end, spans[i].offset + spans[i].size);
    }
    uint64_t pos = AlignDown(run_begin, align);  // Pieces cover the run up to here.
    for (size_t k = first; k < i; ++k) {
      uint64_t begin = 0, end = 0;
      const ReadSpan& span = spans[k];
      if (span.size == 0 ||
          !InPlaceInterior(span.dst, span.offset, span.size, align, align, &begin, &end)) {
        continue;
      }
      AddPieces(pos, begin, piece, run_end, kStaged, &pieces);
      AddPieces(begin, end, piece, run_end, k, &pieces);
      pos = end;
    }
    AddPieces(pos, AlignUp(run_end, align), piece, run_end, kStaged, &pieces);
  }
  return pieces;
}

// The staging ring and the I/O threads that fill it: piece p goes to slot p % kSlots once the
// consumer has released piece p - kSlots.
class PieceRing {
 public:
  PieceRing(const DirectReadFile& file, const std::vector<ReadSpan>& spans,
            const std::vector<Piece>& pieces, size_t piece_bytes)
      : file_(file),
        spans_(spans),
        pieces_(pieces),
        piece_bytes_(piece_bytes),
        memory_(AllocateStaging(piece_bytes, file.alignment())),
        slots_(kSlots) {
    const int n = static_cast<int>(std::min<size_t>(kIoThreads, pieces_.size()));
    for (int t = 0; t < n; ++t) threads_.emplace_back([this] { Work(); });
  }
  ~PieceRing() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Waits for piece p; where its bytes are (a staging buffer, or the span's destination for a
  // piece read in place) and how many the read returned, or the read's error.
  absl::StatusOr<std::pair<const char*, size_t>> Wait(size_t p) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& slot = slots_[p % kSlots];
    cv_.wait(lock, [&] { return slot.filled == p + 1; });
    if (!slot.status.ok()) return slot.status;
    return std::make_pair(static_cast<const char*>(Destination(p)), slot.got);
  }
  // Piece p has been consumed; its slot may take piece p + kSlots.
  void Release(size_t p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      consumed_ = p + 1;
    }
    cv_.notify_all();
  }

 private:
  struct Slot {
    size_t filled = 0;  // 1 + the piece it holds, 0 for none.
    absl::Status status;
    size_t got = 0;
  };

  // Where piece p is read to: its slot's staging buffer, or its place in its span's destination.
  char* Destination(size_t p) const {
    const Piece& piece = pieces_[p];
    if (piece.span == kStaged) return memory_.get() + (p % kSlots) * piece_bytes_;
    const ReadSpan& s = spans_[piece.span];
    return s.dst + (piece.offset - s.offset);
  }

  void Work() {
    for (;;) {
      const size_t p = next_.fetch_add(1);
      if (p >= pieces_.size()) return;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || consumed_ + kSlots > p; });
        if (stop_) return;
      }
      absl::StatusOr<size_t> got = file_.Read(pieces_[p].offset, pieces_[p].length, Destination(p));
      {
        std::lock_guard<std::mutex> lock(mu_);
        Slot& slot = slots_[p % kSlots];
        slot.status = got.status();
        slot.got = got.ok() ? *got : 0;
        slot.filled = p + 1;
      }
      cv_.notify_all();
    }
  }

  const DirectReadFile& file_;
  const std::vector<ReadSpan>& spans_;
  const std::vector<Piece>& pieces_;
  const size_t piece_bytes_;
  StagingMemory memory_;
  std::atomic<size_t> next_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;  // Guarded by mu_.
  size_t consumed_ = 0;      // Guarded by mu_.
  bool stop_ = false;        // Guarded by mu_.
  std::vector<std::thread> threads_;
};

}  // namespace

absl::Status ReadSpansDirect(const DirectReadFile& file, const std::vector<ReadSpan>& spans,
                             const ReadProgress& progress, std::vector<size_t>* done,
                             uint64_t* in_place_bytes) {
  done->assign(spans.size(), 0);
  *in_place_bytes = 0;
  const uint64_t align = file.alignment();
  const size_t piece_bytes = AlignUp(kPieceBytes, align);
  const std::vector<Piece> pieces = PlanPieces(spans, align, piece_bytes);
  if (pieces.empty()) return absl::OkStatus();
  PieceRing ring(file, spans, pieces, piece_bytes);
  size_t cursor = 0;  // The first span not yet complete.
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Piece& piece = pieces[p];
    absl::StatusOr<std::pair<const char*, size_t>> read = ring.Wait(p);
    if (!read.ok()) return read.status();
    const auto [data, got] = *read;
    const uint64_t piece_end = piece.offset + piece.length;
    if (piece.offset + got < std::min(piece_end, piece.needed_end)) {
      return absl::DataLossError(
          absl::StrCat(file.path(), ": file ends at byte ", piece.offset + got, " (truncated?)"));
    }
    // A piece read in place lies inside its span, the first one not yet complete.
    if (piece.span != kStaged) *in_place_bytes += piece.length;
    for (; cursor < spans.size(); ++cursor) {
      const ReadSpan& s = spans[cursor];
      const uint64_t s_end = s.offset + s.size;
      if (s.size > 0) {
        if (s.offset >= piece_end) break;
        const uint64_t lo = std::max(s.offset, piece.offset);
        const uint64_t hi = std::min(s_end, piece_end);
        if (hi > lo) {
          if (piece.span == kStaged) {
            std::memcpy(s.dst + (lo - s.offset), data + (lo - piece.offset), hi - lo);
          }
          (*done)[cursor] = hi - s.offset;
          progress(cursor, (*done)[cursor]);
        }
      }
      if (s_end > piece_end) break;
    }
    ring.Release(p);
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace checkpoint
}  // namespace mt
