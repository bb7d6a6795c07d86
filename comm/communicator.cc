#include "comm/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/check.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace comm {

namespace {

// Dtypes every call accepts, and those that can be reduced.
constexpr std::initializer_list<DType> kMoveDTypes = {DType::kF32, DType::kBF16, DType::kF16,
                                                      DType::kI32, DType::kI64,  DType::kU16};
constexpr std::initializer_list<DType> kReduceDTypes = {DType::kF32, DType::kBF16, DType::kF16,
                                                        DType::kI32, DType::kI64};

bool Overlap(const TensorView& a, const TensorView& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0 || a.device != b.device) return false;
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// in/out pairs: both contiguous, one dtype, one device, disjoint.
absl::Status CheckPair(absl::string_view op, const TensorView& in, const TensorView& out,
                       std::initializer_list<DType> dtypes) {
  RETURN_IF_ERROR(ops::CheckContiguous(op, "in", in));
  RETURN_IF_ERROR(ops::CheckContiguous(op, "out", out));
  RETURN_IF_ERROR(ops::CheckDType(op, "in", in, dtypes));
  RETURN_IF_ERROR(ops::CheckSameDType(op, {&in, &out}));
  RETURN_IF_ERROR(ops::CheckSameDevice(op, {&in, &out}));
  if (Overlap(in, out)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": in (", in.DebugString(), ") and out (",
                                                   out.DebugString(), ") overlap"));
  }
  return absl::OkStatus();
}

// InvalidArgument unless `rows` has `size` entries >= 0 that sum to t's rows (an all-to-all's
// blocks).
absl::Status CheckBlocks(absl::string_view op, absl::string_view what,
                         absl::Span<const int64_t> rows, const TensorView& t, int size) {
  int64_t sum = 0;
  bool valid = static_cast<int>(rows.size()) == size;
  for (int64_t n : rows) {
    valid = valid && n >= 0;
    sum += n;
  }
  if (valid && sum == t.dim(0)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", what, " (", absl::StrJoin(rows, ","), ") must be ", size,
                   " counts >= 0 that sum to its tensor's rows, ", t.dim(0)));
}

}  // namespace

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

int64_t CommCounters::calls() const {
  return all_reduce + all_gather + reduce_scatter + broadcast + barrier + send + recv + all_to_all;
}

std::string CommCounters::DebugString() const {
  return absl::StrCat("all_reduce=", all_reduce, " all_gather=", all_gather,
                      " reduce_scatter=", reduce_scatter, " broadcast=", broadcast,
                      " barrier=", barrier, " send=", send, " recv=", recv,
                      " all_to_all=", all_to_all, " bytes=", bytes);
}

bool operator==(const CommCounters& a, const CommCounters& b) {
  return a.all_reduce == b.all_reduce && a.all_gather == b.all_gather &&
         a.reduce_scatter == b.reduce_scatter && a.broadcast == b.broadcast &&
         a.barrier == b.barrier && a.send == b.send && a.recv == b.recv &&
         a.all_to_all == b.all_to_all && a.bytes == b.bytes;
}

namespace {

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Enter/Leave of a monitor (if any) around one blocking call.
class CallScope {
 public:
  CallScope(CallMonitor* monitor, const char* op) : monitor_(monitor) {
    if (monitor_ != nullptr) monitor_->Enter(op);
  }
  ~CallScope() {
    if (monitor_ != nullptr) monitor_->Leave();
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  CallMonitor* monitor_;
};

}  // namespace

void CallMonitor::Enter(const char* op) {
  if (depth_++ > 0) return;
  op_.store(op, std::memory_order_relaxed);
  calls_.fetch_add(1, std::memory_order_relaxed);
  entered_ns_.store(std::max<int64_t>(SteadyNanos(), 1), std::memory_order_release);
}

void CallMonitor::Leave() {
  if (--depth_ > 0) return;
  const int64_t entered = entered_ns_.exchange(0, std::memory_order_acq_rel);
  finished_ns_.fetch_add(std::max<int64_t>(SteadyNanos() - entered, 0), std::memory_order_relaxed);
}

CallMonitor::Snapshot CallMonitor::Read() const {
  Snapshot s;
  const int64_t entered = entered_ns_.load(std::memory_order_acquire);
  s.calls = calls_.load(std::memory_order_relaxed);
  s.op = op_.load(std::memory_order_relaxed);
  s.in_call = entered != 0;
  if (s.in_call) s.seconds_in_call = std::max<int64_t>(SteadyNanos() - entered, 0) * 1e-9;
  s.seconds_in_calls = finished_ns_.load(std::memory_order_relaxed) * 1e-9 + s.seconds_in_call;
  return s;
}

CommRequest::CommRequest(std::string label) : label_(std::move(label)) {}

CommRequest::~CommRequest() {
  // Subclasses with pending work have waited in their own destructor (WaitIfPending); a request
  // that still counts as pending here had nothing left to wait for.
  if (owner_ != nullptr) --owner_->pending_requests_;
}

absl::StatusOr<bool> CommRequest::Test() {
  if (done_) {
    if (!status_.ok()) return status_;
    return true;
  }
  absl::StatusOr<bool> r = DoTest();
  if (!r.ok()) {
    Finish(r.status());
    return r.status();
  }
  if (*r) Finish(absl::OkStatus());
  return *r;
}

absl::Status CommRequest::Wait() {
  if (done_) return status_;
  CallScope scope(owner_ != nullptr ? owner_->monitor_ : nullptr, "Wait");
  absl::Status s = DoWait();
  Finish(s);
  return s;
}

void CommRequest::WaitIfPending() {
  if (done_) return;
  absl::Status s = Wait();
  LOG_IF(ERROR, !s.ok()) << label_ << ": request destroyed before completion; waiting for it "
                         << "failed: " << s;
}

void CommRequest::Finish(absl::Status status) {
  done_ = true;
  status_ = std::move(status);
  if (owner_ != nullptr) {
    --owner_->pending_requests_;
    owner_ = nullptr;
  }
}

Communicator::Communicator(int rank, int size, std::string name)
    : rank_(rank), size_(size), name_(std::move(name)) {
  CHECK_GE(size_, 1);
  CHECK(0 <= rank_ && rank_ < size_) << "rank " << rank_ << " of " << size_;
}

Communicator::~Communicator() {
  CHECK_EQ(pending_requests_, 0)
      << DebugString() << " destroyed with pending CommRequests: wait for or destroy every "
      << "request before its communicator";
}

std::string Communicator::DebugString() const {
  return absl::StrCat(backend(), " communicator", name_.empty() ? "" : " '", name_,
                      name_.empty() ? "" : "'", " (rank ", rank_, " of ", size_, ")");
}

std::string Communicator::OpLabel(absl::string_view op) const {
  return absl::StrCat("Communicator::", op, " (", backend(), name_.empty() ? "" : " '", name_,
                      name_.empty() ? "" : "'", ", rank ", rank_, " of ", size_, ")");
}

CommCounters Communicator::ResetCounters() {
  CommCounters old = counters_;
  counters_ = CommCounters();
  return old;
}

absl::Status Communicator::AllReduce(const TensorView& t, ReduceOp op) {
  const std::string label = OpLabel("AllReduce");
  RETURN_IF_ERROR(ops::CheckContiguous(label, "t", t));
  RETURN_IF_ERROR(ops::CheckDType(label, "t", t, kReduceDTypes));
  ++counters_.all_reduce;
  counters_.bytes += t.nbytes();
  if (t.numel() == 0) return absl::OkStatus();
  CallScope scope(monitor_, "AllReduce");
  return DoAllReduce(t, op);
}

absl::StatusOr<std::unique_ptr<CommRequest>> Communicator::AllReduceAsync(const TensorView& t,
                                                                          ReduceOp op) {
  std::string label = OpLabel("AllReduceAsync");
  RETURN_IF_ERROR(ops::CheckContiguous(label, "t", t));
  RETURN_IF_ERROR(ops::CheckDType(label, "t", t, kReduceDTypes));
  ++counters_.all_reduce;
  counters_.bytes += t.nbytes();
  std::unique_ptr<CommRequest> request;
  if (t.numel() == 0) {
    request = internal::CompletedRequest(std::move(label));
  } else {
    CallScope scope(monitor_, "AllReduceAsync");
    ASSIGN_OR_RETURN(request, DoAllReduceAsync(t, op));
  }
  // A backend may hand back a request of another communicator (NCCL passes CPU tensors to its
  // MPI bootstrap), which already counts it.
  Adopt(request.get());
  return request;
}

absl::StatusOr<std::unique_ptr<CommRequest>> Communicator::DoAllReduceAsync(const TensorView& t,
                                                                            ReduceOp op) {
  RETURN_IF_ERROR(DoAllReduce(t, op));
  return internal::CompletedRequest(OpLabel("AllReduceAsync"));
}

absl::Status Communicator::AllGather(const TensorView& in, const TensorView& out, GatherAxis axis) {
  const std::string label = OpLabel("AllGather");
  RETURN_IF_ERROR(CheckPair(label, in, out, kMoveDTypes));
  if (in.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": in (", in.DebugString(), ") must have rank >= 1"));
  }
  Shape expected = in.shape;
  const int d = axis == GatherAxis::kFirst ? 0 : in.rank() - 1;
  expected[d] *= size_;
  RETURN_IF_ERROR(ops::CheckShape(label, "out", out, expected));
  ++counters_.all_gather;
  counters_.bytes += in.nbytes();
  if (in.numel() == 0) return absl::OkStatus();
  CallScope scope(monitor_, "AllGather");
  // A gather along the last dimension of a tensor with one row is a gather along the first.
  if (axis == GatherAxis::kFirst || in.numel() == in.dim(-1)) return DoAllGather(in, out);
  return DoAllGatherLastDim(in, out);
}

absl::Status Communicator::CheckAndCountReduceScatter(const std::string& label,
                                                      const TensorView& in, const TensorView& out) {
  RETURN_IF_ERROR(CheckPair(label, in, out, kReduceDTypes));
  if (out.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": out (", out.DebugString(), ") must have rank >= 1"));
  }
  Shape expected = out.shape;
  expected[0] *= size_;
  RETURN_IF_ERROR(ops::CheckShape(label, "in", in, expected));
  ++counters_.reduce_scatter;
  counters_.bytes += in.nbytes();
  return absl::OkStatus();
}

absl::Status Communicator::ReduceScatter(const TensorView& in, const TensorView& out, ReduceOp op) {
  RETURN_IF_ERROR(CheckAndCountReduceScatter(OpLabel("ReduceScatter"), in, out));
  if (out.numel() == 0) return absl::OkStatus();
  CallScope scope(monitor_, "ReduceScatter");
  return DoReduceScatter(in, out, op);
}

absl::StatusOr<std::unique_ptr<CommRequest>> Communicator::ReduceScatterAsync(const TensorView& in,
                                                                              const TensorView& out,
                                                                              ReduceOp op) {
  std::string label = OpLabel("ReduceScatterAsync");
  RETURN_IF_ERROR(CheckAndCountReduceScatter(label, in, out));
  std::unique_ptr<CommRequest> request;
  if (out.numel() == 0) {
    request = internal::CompletedRequest(std::move(label));
  } else {
    CallScope scope(monitor_, "ReduceScatterAsync");
    ASSIGN_OR_RETURN(request, DoReduceScatterAsync(in, out, op));
  }
  Adopt(request.get());  // As in AllReduceAsync.
  return request;
}

absl::StatusOr<std::unique_ptr<CommRequest>> Communicator::DoReduceScatterAsync(
    const TensorView& in, const TensorView& out, ReduceOp op) {
  RETURN_IF_ERROR(DoReduceScatter(in, out, op));
  return internal::CompletedRequest(OpLabel("ReduceScatterAsync"));
}

absl::Status Communicator::Broadcast(const TensorView& t, int root) {
  const std::string label = OpLabel("Broadcast");
  RETURN_IF_ERROR(ops::CheckContiguous(label, "t", t));
  RETURN_IF_ERROR(ops::CheckDType(label, "t", t, kMoveDTypes));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": root ", root, " is not a rank of this group (size ", size_, ")"));
  }
  ++counters_.broadcast;
  counters_.bytes += t.nbytes();
  if (t.numel() == 0) return absl::OkStatus();
  CallScope scope(monitor_, "Broadcast");
  return DoBroadcast(t, root);
}

absl::Status Communicator::Barrier() {
  ++counters_.barrier;
  CallScope scope(monitor_, "Barrier");
  return DoBarrier();
}

namespace {
absl::Status CheckPeer(absl::string_view label, int peer, int tag, int rank, int size) {
  if (peer < 0 || peer >= size || peer == rank) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": peer ", peer,
                                                   " must be another rank of this group (size ",
                                                   size, ", this rank ", rank, ")"));
  }
  if (tag < 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": tag ", tag, " must be >= 0"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status Communicator::CheckAndCountP2p(const std::string& label, const TensorView& t, int peer,
                                            int tag, bool recv) {
  RETURN_IF_ERROR(ops::CheckContiguous(label, "t", t));
  RETURN_IF_ERROR(ops::CheckDType(label, "t", t, kMoveDTypes));
  RETURN_IF_ERROR(CheckPeer(label, peer, tag, rank_, size_));
  ++(recv ? counters_.recv : counters_.send);
  counters_.bytes += t.nbytes();
  return absl::OkStatus();
}

absl::Status Communicator::AllToAllV(const TensorView& in, absl::Span<const int64_t> send_rows,
                                     const TensorView& out, absl::Span<const int64_t> recv_rows) {
  const std::string label = OpLabel("AllToAllV");
  RETURN_IF_ERROR(CheckPair(label, in, out, kMoveDTypes));
  if (in.rank() < 1 || out.rank() != in.rank() ||
      !std::equal(in.shape.begin() + 1, in.shape.end(), out.shape.begin() + 1)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": in (", in.DebugString(), ") and out (",
                                                   out.DebugString(),
                                                   ") must have rank >= 1 and the same rows"));
  }
  RETURN_IF_ERROR(CheckBlocks(label, "send_rows", send_rows, in, size_));
  RETURN_IF_ERROR(CheckBlocks(label, "recv_rows", recv_rows, out, size_));
  ++counters_.all_to_all;
  counters_.bytes += in.nbytes();
  CallScope scope(monitor_, "AllToAllV");
  return DoAllToAllV(in, send_rows, out, recv_rows);
}

absl::Status Communicator::Send(const TensorView& t, int peer, int tag) {
  RETURN_IF_ERROR(CheckAndCountP2p(OpLabel("Send"), t, peer, tag, /*recv=*/false));
  CallScope scope(monitor_, "Send");
  return DoSend(t, peer, tag);
}

absl::Status Communicator::Recv(const TensorView& t, int peer, int tag) {
  RETURN_IF_ERROR(CheckAndCountP2p(OpLabel("Recv"), t, peer, tag, /*recv=*/true));
  CallScope scope(monitor_, "Recv");
  return DoRecv(t, peer, tag);
}

void Communicator::Adopt(CommRequest* request) {
  if (request->owner_ == nullptr && !request->done_) {
    request->owner_ = this;
    ++pending_requests_;
  }
}

absl::StatusOr<std::unique_ptr<CommRequest>> Communicator::SendAsync(const TensorView& t, int peer,
                                                                     int tag) {
  RETURN_IF_ERROR(CheckAndCountP2p(OpLabel("SendAsync"), t, peer, tag, /*recv=*/false));
  CallScope scope(monitor_, "SendAsync");
  ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> request, DoSendAsync(t, peer, tag));
  Adopt(request.get());
  return request;
}

absl::StatusOr<std::unique_ptr<CommRequest>> Communicator::RecvAsync(const TensorView& t, int peer,
                                                                     int tag) {
  RETURN_IF_ERROR(CheckAndCountP2p(OpLabel("RecvAsync"), t, peer, tag, /*recv=*/true));
  CallScope scope(monitor_, "RecvAsync");
  ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> request, DoRecvAsync(t, peer, tag));
  Adopt(request.get());
  return request;
}

absl::StatusOr<std::unique_ptr<CommRequest>> Communicator::DoSendAsync(const TensorView& t,
                                                                       int peer, int tag) {
  RETURN_IF_ERROR(DoSend(t, peer, tag));
  return internal::CompletedRequest(OpLabel("SendAsync"));
}

absl::StatusOr<std::unique_ptr<CommRequest>> Communicator::DoRecvAsync(const TensorView& t,
                                                                       int peer, int tag) {
  RETURN_IF_ERROR(DoRecv(t, peer, tag));
  return internal::CompletedRequest(OpLabel("RecvAsync"));
}

namespace internal {

int64_t RowBytes(const TensorView& t) {
  return t.rank() < 1 || t.dim(0) == 0 ? 0 : static_cast<int64_t>(t.nbytes()) / t.dim(0);
}

namespace {
class CompletedCommRequest final : public CommRequest {
 public:
  explicit CompletedCommRequest(std::string label) : CommRequest(std::move(label)) {}

 protected:
  absl::StatusOr<bool> DoTest() override { return true; }
  absl::Status DoWait() override { return absl::OkStatus(); }
};
}  // namespace

std::unique_ptr<CommRequest> CompletedRequest(std::string label) {
  return std::make_unique<CompletedCommRequest>(std::move(label));
}

void InterleaveGatheredRows(const void* src, void* dst, int size, int64_t rows, size_t row_bytes) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  const size_t out_row = row_bytes * size;
  for (int r = 0; r < size; ++r) {
    const char* block = s + static_cast<size_t>(r) * rows * row_bytes;
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(d + i * out_row + r * row_bytes, block + i * row_bytes, row_bytes);
    }
  }
}

void* HostScratch::Get(size_t nbytes) {
  if (nbytes > capacity_) {
    constexpr size_t kAlign = 64;
    owned_.reset(new char[nbytes + kAlign]);
    const uintptr_t p = reinterpret_cast<uintptr_t>(owned_.get());
    data_ = reinterpret_cast<void*>((p + kAlign - 1) & ~(kAlign - 1));
    capacity_ = nbytes;
  }
  return data_;
}

}  // namespace internal

}  // namespace comm
}  // namespace mt
