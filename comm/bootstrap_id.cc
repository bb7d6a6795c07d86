#include "comm/bootstrap_id.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mt {
namespace comm {

absl::Status ShareIdFromRankZero(Communicator& bootstrap, absl::Span<uint8_t> id,
                                 const std::function<absl::Status(absl::Span<uint8_t>)>& make,
                                 absl::string_view label) {
  absl::Status made = absl::OkStatus();
  if (bootstrap.rank() == 0) made = make(id);
  int64_t failed = made.ok() ? 0 : 1;
  RETURN_IF_ERROR(bootstrap.Broadcast(TensorView(&failed, Shape{1}, DType::kI64), 0));
  if (failed) {
    if (bootstrap.rank() == 0) return made;
    return absl::FailedPreconditionError(
        absl::StrCat(label, ": rank 0 could not create the id to meet by"));
  }
  if (id.empty()) return absl::OkStatus();
  // The bytes travel as 16-bit words (the smallest element type), padded to an even count.
  std::vector<uint16_t> words((id.size() + 1) / 2, 0);
  std::memcpy(words.data(), id.data(), id.size());
  RETURN_IF_ERROR(bootstrap.Broadcast(
      TensorView(words.data(), Shape{static_cast<int64_t>(words.size())}, DType::kU16), 0));
  std::memcpy(id.data(), words.data(), id.size());
  return absl::OkStatus();
}

}  // namespace comm
}  // namespace mt
