// The id a group of ranks meets by: NCCL's bootstrap (and any library like it) has one rank make an
// opaque id, the address its peers will connect to (ncclGetUniqueId), which every other rank must
// receive over a channel that already works (here an MPI communicator) before the group can form.
//
//   uint8_t id[128];
//   RETURN_IF_ERROR(ShareIdFromRankZero(bootstrap, absl::MakeSpan(id), MakeId, "label"));
//
// Kept apart from the NCCL communicator so that the exchange is tested on every build, across
// machines too (tools/cluster), while NCCL itself needs one GPU per rank.
#ifndef MT_COMM_BOOTSTRAP_ID_H_
#define MT_COMM_BOOTSTRAP_ID_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "comm/communicator.h"

namespace mt {
namespace comm {

// Rank 0 of `bootstrap` calls `make` to fill `id`; whether that worked goes to every rank first
// (so no rank waits for an id that will not come), then the bytes. Every rank passes a span of
// the same size. Returns OK with rank 0's bytes in `id` on every rank; when `make` fails, rank 0
// returns its error and the others FailedPrecondition naming rank 0 and `label`. A collective;
// `make` is called on rank 0 only.
absl::Status ShareIdFromRankZero(Communicator& bootstrap, absl::Span<uint8_t> id,
                                 const std::function<absl::Status(absl::Span<uint8_t>)>& make,
                                 absl::string_view label);

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_BOOTSTRAP_ID_H_
