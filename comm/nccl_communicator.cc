// CUDA builds: the NCCL backend (see nccl_communicator.h).
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/bootstrap_id.h"
#include "core/cuda_error.h"
#include "core/status.h"
#include "core/tensor.h"
#include "glog/logging.h"

namespace mt {
namespace comm {

namespace {

absl::Status NcclError(ncclResult_t res, ncclComm_t comm, const char* what, const char* file,
                       int line) {
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : "";
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", what,
                                          " failed: ", ncclGetErrorString(res),
                                          detail && *detail ? absl::StrCat(" (", detail, ")") : "",
                                          "; run with NCCL_DEBUG=WARN for details"));
}

// For calls that start work (ncclInProgress is success-so-far in non-blocking mode).
absl::Status NcclStarted(ncclResult_t res, ncclComm_t comm, const char* what, const char* file,
                         int line) {
  if (res == ncclSuccess || res == ncclInProgress) return absl::OkStatus();
  return NcclError(res, comm, what, file, line);
}
#define MT_NCCL_STARTED(comm, expr) NcclStarted((expr), comm, #expr, __FILE__, __LINE__)
#define MT_NCCL_RETURN_IF_ERROR(comm, expr) RETURN_IF_ERROR(MT_NCCL_STARTED(comm, expr))

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU16:
      return ncclUint8;  // Only moved, as bytes (counts are then in bytes).
  }
  return ncclUint8;
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

using Clock = std::chrono::steady_clock;

class NcclCollectiveRequest;

class NcclCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(Communicator& bootstrap, int device,
                                                              const NcclOptions& options,
                                                              absl::string_view name);

  ~NcclCommunicator() override {
    if (comm_ != nullptr) {
      // Flush and tear down; a peer that is gone cannot make this hang past the timeout.
      cudaSetDevice(device_);
      const ncclResult_t res = ncclCommFinalize(comm_);
      absl::Status s = res == ncclSuccess || res == ncclInProgress
                           ? WaitForComm("ncclCommFinalize", Clock::now() + Timeout())
                           : NcclError(res, comm_, "ncclCommFinalize", __FILE__, __LINE__);
      if (comm_ != nullptr) {
        if (s.ok()) {
          ncclCommDestroy(comm_);
        } else {
          LOG(WARNING) << DebugString() << ": " << s << "; aborting the NCCL communicator";
          ncclCommAbort(comm_);
        }
      }
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  absl::string_view backend() const override { return "nccl"; }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key,
                                                      absl::string_view name) override {
    if (color < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(OpLabel("Split"), ": color ", color, " must be >= 0"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, bootstrap_->Split(color, key, name));
    return Create(*sub, device_, options_, name);
  }

 protected:
  absl::Status DoAllReduce(const TensorView& t, ReduceOp op) override {
    return Run(
        "AllReduce", t, [&] { return bootstrap_->AllReduce(t, op); },
        [&] {
          return MT_NCCL_STARTED(comm_, ncclAllReduce(t.data, t.data, t.numel(), NcclType(t.dtype),
                                                      NcclOp(op), comm_, stream_));
        });
  }

  // Defined after NcclCollectiveRequest.
  absl::StatusOr<std::unique_ptr<CommRequest>> DoAllReduceAsync(const TensorView& t,
                                                                ReduceOp op) override;
  absl::StatusOr<std::unique_ptr<CommRequest>> DoReduceScatterAsync(const TensorView& in,
                                                                    const TensorView& out,
                                                                    ReduceOp op) override;

  absl::Status DoAllGather(const TensorView& in, const TensorView& out) override {
    return Run(
        "AllGather", in, [&] { return bootstrap_->AllGather(in, out); },
        [&] {
          return MT_NCCL_STARTED(
              comm_, ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, comm_, stream_));
        });
  }

  absl::Status DoAllGatherLastDim(const TensorView& in, const TensorView& out) override {
    const std::string label = OpLabel("AllGather");
    ASSIGN_OR_RETURN(const bool gpu, OnDevice(label, in));
    if (!gpu) return bootstrap_->AllGather(in, out, GatherAxis::kLast);
    ASSIGN_OR_RETURN(void* gathered, Scratch(out.nbytes()));
    RETURN_IF_ERROR(Begin(label));
    MT_NCCL_RETURN_IF_ERROR(
        comm_, ncclAllGather(in.data, gathered, in.nbytes(), ncclUint8, comm_, stream_));
    // A non-blocking communicator may still be enqueueing the gather: the copies below must be
    // queued after it on the stream.
    RETURN_IF_ERROR(WaitForComm(label, Clock::now() + Timeout()));
    // Rank r's block [rows, c] goes to columns [r c, (r + 1) c) of out [rows, size c].
    const size_t width = in.dim(-1) * DTypeSize(in.dtype);
    const size_t rows = in.numel() / in.dim(-1);
    for (int r = 0; r < size(); ++r) {
      MT_CUDA_RETURN_IF_ERROR(
          cudaMemcpy2DAsync(static_cast<char*>(out.data) + r * width, width * size(),
                            static_cast<const char*>(gathered) + r * rows * width, width, width,
                            rows, cudaMemcpyDeviceToDevice, stream_));
    }
    return Finish(label);
  }

  absl::Status DoReduceScatter(const TensorView& in, const TensorView& out, ReduceOp op) override {
    return Run(
        "ReduceScatter", in, [&] { return bootstrap_->ReduceScatter(in, out, op); },
        [&] {
          return MT_NCCL_STARTED(
              comm_, ncclReduceScatter(in.data, out.data, out.numel(), NcclType(in.dtype),
                                       NcclOp(op), comm_, stream_));
        });
  }

  absl::Status DoBroadcast(const TensorView& t, int root) override {
    return Run(
        "Broadcast", t, [&] { return bootstrap_->Broadcast(t, root); },
        [&] {
          return MT_NCCL_STARTED(
              comm_, ncclBroadcast(t.data, t.data, t.nbytes(), ncclUint8, root, comm_, stream_));
        });
  }

  absl::Status DoBarrier() override {
    // A one-element all-reduce through NCCL: returns once every rank's NCCL stream got there.
    const std::string label = OpLabel("Barrier");
    ASSIGN_OR_RETURN(void* flag, Scratch(sizeof(float)));
    RETURN_IF_ERROR(Begin(label));
    MT_NCCL_RETURN_IF_ERROR(comm_,
                            ncclAllReduce(flag, flag, 1, ncclFloat32, ncclSum, comm_, stream_));
    return Finish(label);
  }

  // A grouped send and receive per peer (NCCL has no all-to-all); host tensors: the bootstrap's.
  absl::Status DoAllToAllV(const TensorView& in, absl::Span<const int64_t> send_rows,
                           const TensorView& out, absl::Span<const int64_t> recv_rows) override {
    auto host = [&] { return bootstrap_->AllToAllV(in, send_rows, out, recv_rows); };
    return Run("AllToAllV", in, host, [&]() -> absl::Status {
      const int64_t in_row = internal::RowBytes(in), out_row = internal::RowBytes(out);
      char *src = static_cast<char*>(in.data), *dst = static_cast<char*>(out.data);
      MT_NCCL_RETURN_IF_ERROR(comm_, ncclGroupStart());
      for (int r = 0; r < size(); ++r) {
        const size_t sent = send_rows[r] * in_row, received = recv_rows[r] * out_row;
        if (sent > 0)
          MT_NCCL_RETURN_IF_ERROR(comm_, ncclSend(src, sent, ncclUint8, r, comm_, stream_));
        if (received > 0)
          MT_NCCL_RETURN_IF_ERROR(comm_, ncclRecv(dst, received, ncclUint8, r, comm_, stream_));
        src += sent;
        dst += received;
      }
      return MT_NCCL_STARTED(comm_, ncclGroupEnd());
    });
  }

  absl::Status DoSend(const TensorView& t, int peer, int tag) override {
    return Run(
        "Send", t, [&] { return bootstrap_->Send(t, peer, tag); },
        [&] {
          return MT_NCCL_STARTED(comm_,
                                 ncclSend(t.data, t.nbytes(), ncclUint8, peer, comm_, stream_));
        });
  }

  absl::Status DoRecv(const TensorView& t, int peer, int tag) override {
    return Run(
        "Recv", t, [&] { return bootstrap_->Recv(t, peer, tag); },
        [&] {
          return MT_NCCL_STARTED(comm_,
                                 ncclRecv(t.data, t.nbytes(), ncclUint8, peer, comm_, stream_));
        });
  }

 private:
  friend class NcclCollectiveRequest;

  NcclCommunicator(std::unique_ptr<Communicator> bootstrap, int device, NcclOptions options,
                   std::string name)
      : Communicator(bootstrap->rank(), bootstrap->size(), std::move(name)),
        bootstrap_(std::move(bootstrap)),
        device_(device),
        options_(options) {}

  // Creates the stream, the event and the NCCL communicator (rank() of size() with `id`), and
  // waits for the non-blocking initialisation.
  absl::Status Init(const ncclUniqueId& id, const std::string& label);

  Clock::duration Timeout() const { return absl::ToChronoNanoseconds(options_.timeout); }

  // A non-blocking collective: after Begin, `enqueue()` (the NCCL call) on stream_, then an event
  // the returned request waits for. Defined after NcclCollectiveRequest.
  absl::StatusOr<std::unique_ptr<CommRequest>> StartAsync(
      const std::string& label, const std::function<ncclResult_t()>& enqueue);

  // A collective on tensor t (op names it in errors): a CPU tensor goes through the bootstrap
  // (`on_host()`); a CUDA tensor is enqueued on stream_ (`enqueue()`, the NCCL call's status)
  // after the compute stream's queued work, and waited for.
  template <typename OnHost, typename Enqueue>
  absl::Status Run(absl::string_view op, const TensorView& t, OnHost on_host, Enqueue enqueue) {
    const std::string label = OpLabel(op);
    ASSIGN_OR_RETURN(const bool gpu, OnDevice(label, t));
    if (!gpu) return on_host();
    RETURN_IF_ERROR(Begin(label));
    RETURN_IF_ERROR(enqueue());
    return Finish(label);
  }

  // True for a CUDA view on our device, false for a CPU view; InvalidArgument otherwise.
  absl::StatusOr<bool> OnDevice(const std::string& label, const TensorView& t) const {
    if (t.device.is_cpu()) return false;
    if (t.device.index != device_) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": tensor (", t.DebugString(),
                       ") is not on this communicator's device cuda:", device_));
    }
    return true;
  }

  // Ready to enqueue: usable, on our device, ordered after the compute stream's queued work.
  absl::Status Begin(const std::string& label) {
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(label,
                       ": the NCCL communicator was aborted after an earlier error or "
                       "timeout; end the job (MpiRuntime::Abort) and restart it"));
    }
    MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    MT_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(ready_, static_cast<cudaStream_t>(options_.compute_stream)));
    MT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready_, 0));
    return absl::OkStatus();
  }

  // Aborts the NCCL communicator; later calls return FailedPrecondition.
  void AbortComm() {
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // AbortComm(), then `error`.
  absl::Status Aborted(absl::Status error) {
    AbortComm();
    return error;
  }

  // An asynchronous NCCL error (a failed peer, a fault in a kernel) aborts the communicator.
  absl::Status CheckAsyncError(const std::string& label) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
    return Aborted(NcclError(state, comm_, label.c_str(), __FILE__, __LINE__));
  }

  // Calls poll() (true once the awaited thing is done) until it is done or fails; aborts at
  // `deadline`.
  template <typename Poll>
  absl::Status PollUntil(const std::string& label, Clock::time_point deadline, Poll poll) {
    while (true) {
      ASSIGN_OR_RETURN(const bool done, poll());
      if (done) return absl::OkStatus();
      if (Clock::now() > deadline) return Aborted(TimeoutError(label));
      std::this_thread::yield();
    }
  }

  // Polls until the communicator's pending host-side operation (non-blocking init, enqueue,
  // finalize) is done; aborts on error or at `deadline`.
  absl::Status WaitForComm(const std::string& label, Clock::time_point deadline) {
    return PollUntil(label, deadline, [&]() -> absl::StatusOr<bool> {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t res = ncclCommGetAsyncError(comm_, &state);
      if (res != ncclSuccess) state = res;
      if (state == ncclSuccess) return true;
      if (state != ncclInProgress) {
        return Aborted(NcclError(state, comm_, label.c_str(), __FILE__, __LINE__));
      }
      return false;
    });
  }

  absl::Status TimeoutError(const std::string& label) const {
    return absl::DeadlineExceededError(absl::StrCat(
        label, ": NCCL did not finish within ", absl::FormatDuration(options_.timeout),
        " (a peer may have failed or stopped calling collectives); the communicator was "
        "aborted with ncclCommAbort; end the job with MpiRuntime::Abort"));
  }

  // Waits until the enqueued work has finished on the GPU, bounded by the timeout.
  absl::Status Finish(const std::string& label) {
    const Clock::time_point deadline = Clock::now() + Timeout();
    RETURN_IF_ERROR(WaitForComm(label, deadline));
    return PollUntil(label, deadline, [&]() -> absl::StatusOr<bool> {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return true;
      if (q != cudaErrorNotReady) {
        return Aborted(cuda::CudaCallError(q, "cudaStreamQuery", __FILE__, __LINE__));
      }
      RETURN_IF_ERROR(CheckAsyncError(label));
      return false;
    });
  }

  // True once `done` (recorded on stream_ after a collective) has completed; the compute stream
  // is then made to wait for it, so work queued there later sees the result. False while it is
  // pending; an NCCL or CUDA error aborts the communicator. Does not block.
  absl::StatusOr<bool> QueryEvent(const std::string& label, cudaEvent_t done) {
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(label,
                       ": the NCCL communicator was aborted (after an error or timeout) while "
                       "this request was pending; the result is undefined; end the job "
                       "(MpiRuntime::Abort)"));
    }
    MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) {
      MT_CUDA_RETURN_IF_ERROR(
          cudaStreamWaitEvent(static_cast<cudaStream_t>(options_.compute_stream), done, 0));
      return true;
    }
    if (q != cudaErrorNotReady)
      return Aborted(cuda::CudaCallError(q, "cudaEventQuery", __FILE__, __LINE__));
    RETURN_IF_ERROR(CheckAsyncError(label));
    return false;
  }

  // Waits until `done` has completed (as QueryEvent), bounded by the timeout from now.
  absl::Status WaitForEvent(const std::string& label, cudaEvent_t done) {
    return PollUntil(label, Clock::now() + Timeout(), [&] { return QueryEvent(label, done); });
  }

  // Device scratch of at least nbytes (grow-only; reallocation waits for pending work).
  absl::StatusOr<void*> Scratch(size_t nbytes) {
    if (nbytes > scratch_bytes_) {
      MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
      if (scratch_ != nullptr) {
        MT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
        MT_CUDA_RETURN_IF_ERROR(cudaFree(scratch_));
        scratch_ = nullptr;
        scratch_bytes_ = 0;
      }
      MT_CUDA_RETURN_IF_ERROR(cudaMalloc(&scratch_, nbytes));
      scratch_bytes_ = nbytes;
    }
    return scratch_;
  }

  std::unique_ptr<Communicator> bootstrap_;  // A duplicate of the creator's bootstrap.
  int device_;
  NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

// "" if cuda:`device` can be used by this rank, else what is wrong; its properties in *prop.
std::string LocalDeviceProblem(int device, cudaDeviceProp* prop) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (device < 0 || device >= count) {
    return absl::StrCat("device cuda:", device, " does not exist (", count,
                        " CUDA devices visible)");
  }
  if (cudaGetDeviceProperties(prop, device) != cudaSuccess) {
    cudaGetLastError();
    return absl::StrCat("cannot query cuda:", device);
  }
  return "";
}

// All ranks learn whether everyone can proceed, so that no rank waits in NCCL initialisation for
// a peer that already gave up: FailedPrecondition on every rank unless `local_problem` is empty on
// every rank. A collective over `bootstrap`.
absl::Status AgreeEveryRankCanProceed(Communicator& bootstrap, const std::string& label,
                                      const std::string& local_problem) {
  int64_t failed = local_problem.empty() ? 0 : 1;
  RETURN_IF_ERROR(bootstrap.AllReduce(TensorView(&failed, Shape{1}, DType::kI64), ReduceOp::kMax));
  if (!failed) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      label, ": ",
      local_problem.empty() ? "another rank could not use its device" : local_problem));
}

// One GPU per rank: every rank compares all device UUIDs, so all reach the same verdict. A
// collective over `bootstrap`.
absl::Status CheckOneGpuPerRank(Communicator& bootstrap, const std::string& label,
                                const cudaDeviceProp& prop) {
  const int n = bootstrap.size();
  std::vector<uint16_t> uuids(8 * n);
  uint16_t mine[8];
  static_assert(sizeof(prop.uuid.bytes) == sizeof(mine), "CUDA UUIDs are 16 bytes");
  std::memcpy(mine, prop.uuid.bytes, sizeof mine);
  RETURN_IF_ERROR(bootstrap.AllGather(TensorView(mine, Shape{8}, DType::kU16),
                                      TensorView(uuids.data(), Shape{8 * n}, DType::kU16)));
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (std::memcmp(&uuids[8 * a], &uuids[8 * b], sizeof mine) == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            label, ": ranks ", a, " and ", b,
            " use the same GPU; NCCL needs one GPU per rank: "
            "launch at most as many ranks per host as GPUs, or use the MPI backend (which "
            "stages CUDA tensors through the host) to share a GPU"));
      }
    }
  }
  return absl::OkStatus();
}

// Rank 0 makes the unique id, which every rank receives over the bootstrap (comm/bootstrap_id.h).
// A collective.
absl::StatusOr<ncclUniqueId> ShareUniqueId(Communicator& bootstrap, const std::string& label) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  RETURN_IF_ERROR(ShareIdFromRankZero(
      bootstrap, absl::MakeSpan(reinterpret_cast<uint8_t*>(&id), sizeof id),
      [](absl::Span<uint8_t> bytes) {
        ncclUniqueId made;
        const ncclResult_t res = ncclGetUniqueId(&made);
        if (res != ncclSuccess) {
          return NcclError(res, nullptr, "ncclGetUniqueId", __FILE__, __LINE__);
        }
        std::memcpy(bytes.data(), &made, sizeof made);
        return absl::OkStatus();
      },
      label));
  return id;
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Create(Communicator& bootstrap,
                                                                       int device,
                                                                       const NcclOptions& options,
                                                                       absl::string_view name) {
  const std::string label = absl::StrCat("CreateNcclCommunicator (rank ", bootstrap.rank(), " of ",
                                         bootstrap.size(), ", cuda:", device, ")");
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": timeout must be positive"));
  }
  // Local checks first; then the collective ones, which every rank passes or fails alike.
  cudaDeviceProp prop = {};
  RETURN_IF_ERROR(AgreeEveryRankCanProceed(bootstrap, label, LocalDeviceProblem(device, &prop)));
  RETURN_IF_ERROR(CheckOneGpuPerRank(bootstrap, label, prop));
  ASSIGN_OR_RETURN(const ncclUniqueId id, ShareUniqueId(bootstrap, label));

  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> dup,
                   bootstrap.Split(0, bootstrap.rank(), absl::StrCat(name, ".bootstrap")));
  std::unique_ptr<NcclCommunicator> c(
      new NcclCommunicator(std::move(dup), device, options, std::string(name)));
  RETURN_IF_ERROR(c->Init(id, label));
  c->set_call_monitor(bootstrap.call_monitor());
  return std::unique_ptr<Communicator>(std::move(c));
}

absl::Status NcclCommunicator::Init(const ncclUniqueId& id, const std::string& label) {
  MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  MT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Returns at once; WaitForComm bounds the wait and can abort.
  const ncclResult_t res = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
  if (res != ncclSuccess && res != ncclInProgress) {
    return Aborted(NcclError(res, comm_, "ncclCommInitRankConfig", __FILE__, __LINE__));
  }
  return WaitForComm(label, Clock::now() + Timeout());
}

// A collective queued on the communicator's stream, followed by `done_` (owned here).
class NcclCollectiveRequest final : public CommRequest {
 public:
  NcclCollectiveRequest(NcclCommunicator* comm, cudaEvent_t done, std::string label)
      : CommRequest(std::move(label)), comm_(comm), done_(done) {}
  ~NcclCollectiveRequest() override {
    WaitIfPending();
    cudaEventDestroy(done_);
  }

 protected:
  absl::StatusOr<bool> DoTest() override { return comm_->QueryEvent(label(), done_); }
  absl::Status DoWait() override { return comm_->WaitForEvent(label(), done_); }

 private:
  NcclCommunicator* comm_;  // Outlives the request (Communicator's destructor checks).
  cudaEvent_t done_;
};

absl::StatusOr<std::unique_ptr<CommRequest>> NcclCommunicator::StartAsync(
    const std::string& label, const std::function<ncclResult_t()>& enqueue) {
  RETURN_IF_ERROR(Begin(label));
  cudaEvent_t done = nullptr;
  MT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const absl::Status started = [&]() -> absl::Status {
    // The label names the call ("Communicator::ReduceScatterAsync (nccl ...)").
    RETURN_IF_ERROR(NcclStarted(enqueue(), comm_, label.c_str(), __FILE__, __LINE__));
    // A non-blocking communicator may still be enqueueing the collective: the event must be
    // recorded after it.
    RETURN_IF_ERROR(WaitForComm(label, Clock::now() + Timeout()));
    MT_CUDA_RETURN_IF_ERROR(cudaEventRecord(done, stream_));
    return absl::OkStatus();
  }();
  if (!started.ok()) {
    cudaEventDestroy(done);
    return started;
  }
  return std::unique_ptr<CommRequest>(new NcclCollectiveRequest(this, done, label));
}

absl::StatusOr<std::unique_ptr<CommRequest>> NcclCommunicator::DoAllReduceAsync(const TensorView& t,
                                                                                ReduceOp op) {
  const std::string label = OpLabel("AllReduceAsync");
  ASSIGN_OR_RETURN(const bool gpu, OnDevice(label, t));
  if (!gpu) return bootstrap_->AllReduceAsync(t, op);
  return StartAsync(label, [&] {
    return ncclAllReduce(t.data, t.data, t.numel(), NcclType(t.dtype), NcclOp(op), comm_, stream_);
  });
}

absl::StatusOr<std::unique_ptr<CommRequest>> NcclCommunicator::DoReduceScatterAsync(
    const TensorView& in, const TensorView& out, ReduceOp op) {
  const std::string label = OpLabel("ReduceScatterAsync");
  ASSIGN_OR_RETURN(const bool gpu, OnDevice(label, in));
  if (!gpu) return bootstrap_->ReduceScatterAsync(in, out, op);
  return StartAsync(label, [&] {
    return ncclReduceScatter(in.data, out.data, out.numel(), NcclType(in.dtype), NcclOp(op), comm_,
                             stream_);
  });
}

}  // namespace

bool NcclAvailable() { return true; }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Communicator& bootstrap,
                                                                     int device,
                                                                     const NcclOptions& options,
                                                                     absl::string_view name) {
  return NcclCommunicator::Create(bootstrap, device, options, name);
}

}  // namespace comm
}  // namespace mt
