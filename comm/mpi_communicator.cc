#include "comm/mpi_communicator.h"

// The C API only: OpenMPI's deprecated C++ bindings would need libmpi_cxx (unoptimised builds
// fail to link without it).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_progress.h"
#include "core/alloc.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace comm {

namespace {

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return absl::StrCat("MPI error ", code);
  return std::string(text, len);
}

absl::Status MpiError(int code, absl::string_view what, const char* file, int line) {
  return absl::InternalError(
      absl::StrCat(file, ":", line, ": ", what, " failed: ", MpiErrorText(code)));
}

#define MT_MPI_RETURN_IF_ERROR(expr)                                                         \
  do {                                                                                       \
    const int mt_mpi_err_ = (expr);                                                          \
    if (mt_mpi_err_ != MPI_SUCCESS) return MpiError(mt_mpi_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// The MPI datatype that carries one element. 16-bit floats travel as uint16 when data only moves;
// reductions convert them to f32 first.
MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kBF16:
    case DType::kF16:
    case DType::kU16:
      return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op MpiOp(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

bool IsHalf(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

absl::StatusOr<int> MpiCount(int64_t n, absl::string_view what) {
  if (n > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", n, " elements exceed MPI's int count; split the tensor into smaller calls"));
  }
  return static_cast<int>(n);
}

void HalfToF32(const void* src, DType dtype, float* dst, int64_t n) {
  if (dtype == DType::kBF16) {
    const bf16* s = static_cast<const bf16*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(s[i]);
  } else {
    const f16* s = static_cast<const f16*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(s[i]);
  }
}

void F32ToHalf(const float* src, DType dtype, void* dst, int64_t n) {
  if (dtype == DType::kBF16) {
    bf16* d = static_cast<bf16*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = FloatToBf16(src[i]);
  } else {
    f16* d = static_cast<f16*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = FloatToHalf(src[i]);
  }
}

// MPI reads and writes host memory: a tensor elsewhere goes through a HostStaging (core/alloc.h).
// The copies are synchronous on the legacy default stream, hence the default context.

// Host memory holding t's contents: t itself in host memory, else a copy in `stage`.
absl::StatusOr<void*> StageIn(const TensorView& t, HostStaging* stage) {
  ASSIGN_OR_RETURN(const TensorView host, stage->Download(ExecContext(), t));
  return host.data;
}
// Host memory to receive t's new contents: t itself in host memory, else `stage`.
absl::StatusOr<void*> HostFor(const TensorView& t, HostStaging* stage) {
  ASSIGN_OR_RETURN(const TensorView host, stage->ForWriting(t));
  return host.data;
}
// Completes a call whose result is in `host` (from StageIn/HostFor for t): nothing to do when
// `host` is t itself.
absl::Status StageOut(void* host, const TensorView& t) {
  return CopyTensor(ExecContext(), TensorView(host, t.shape, t.dtype), t);
}

// Where a reduction of `in` into `out` (an all-reduce in place when !scatter: out is in; else a
// reduce-scatter) reads and writes on the host. MPI has no 16-bit float type, so bf16/f16 are
// widened into f32 scratch for the call and narrowed into host_out after it (FinishReduce).
struct ReduceBuffers {
  void* send = nullptr;  // What MPI reads; an in-place all-reduce also writes its result here.
  void* recv = nullptr;  // What a reduce-scatter writes.
  MPI_Datatype type = MPI_DATATYPE_NULL;
  void* host_out = nullptr;     // out's bytes on the host: out itself (CPU) or a stage.
  float* f32_result = nullptr;  // The f32 result of a 16-bit reduction, narrowed into host_out.
};

// The staging and scratch hold the host copies (CUDA tensors) and the f32 values (16-bit ones);
// they must outlive the call, which for a non-blocking one is its request.
struct ReduceStaging {
  HostStaging* in;
  HostStaging* out;
  internal::HostScratch* f32_in;
  internal::HostScratch* f32_out;
};

absl::StatusOr<ReduceBuffers> StartReduce(const TensorView& in, const TensorView& out, bool scatter,
                                          const ReduceStaging& staging) {
  ReduceBuffers b;
  ASSIGN_OR_RETURN(void* host_in, StageIn(in, staging.in));
  if (scatter) {
    ASSIGN_OR_RETURN(b.host_out, HostFor(out, staging.out));
  } else {
    b.host_out = host_in;
  }
  b.send = host_in;
  b.recv = b.host_out;
  b.type = MpiType(in.dtype);
  if (IsHalf(in.dtype)) {
    float* f_in = static_cast<float*>(staging.f32_in->Get(in.numel() * sizeof(float)));
    HalfToF32(host_in, in.dtype, f_in, in.numel());
    b.send = f_in;
    b.recv = scatter ? staging.f32_out->Get(out.numel() * sizeof(float)) : f_in;
    b.f32_result = static_cast<float*>(b.recv);
    b.type = MPI_FLOAT;
  }
  return b;
}

// The reduction has completed: its result goes into out (f32 -> 16 bits, host -> device).
absl::Status FinishReduce(const ReduceBuffers& b, const TensorView& out) {
  if (b.f32_result != nullptr) F32ToHalf(b.f32_result, out.dtype, b.host_out, out.numel());
  return StageOut(b.host_out, out);
}

// An MPI_Iallreduce or MPI_Ireduce_scatter_block in flight. f32/i32/i64 CPU tensors are reduced
// in place (all-reduce) or from `in` into `out` (reduce-scatter); CUDA tensors and 16-bit floats go
// through buffers owned by the request (host copies of CUDA tensors, the f32 values of 16-bit
// ones), filled at the start and copied/converted back into `out` when completion is first
// observed. So the request owns everything MPI is working on except the tensors.
class MpiReduceRequest final : public CommRequest {
 public:
  // Stages the tensors and starts the collective (an all-reduce of `in` in place when `scatter`
  // is false; out must then be in); the request is returned only if it started.
  static absl::StatusOr<std::unique_ptr<CommRequest>> Start(MPI_Comm comm, const TensorView& in,
                                                            const TensorView& out, ReduceOp op,
                                                            bool scatter, std::string label) {
    ASSIGN_OR_RETURN(const int n_in, MpiCount(in.numel(), label));
    ASSIGN_OR_RETURN(const int n_out, MpiCount(out.numel(), label));
    std::unique_ptr<MpiReduceRequest> r(new MpiReduceRequest(out, std::move(label)));
    ASSIGN_OR_RETURN(
        r->buffers_,
        StartReduce(in, out, scatter, {&r->stage_in_, &r->stage_out_, &r->f32_in_, &r->f32_out_}));
    const ReduceBuffers& b = r->buffers_;
    if (scatter) {
      MT_MPI_RETURN_IF_ERROR(
          MPI_Ireduce_scatter_block(b.send, b.recv, n_out, b.type, MpiOp(op), comm, &r->req_));
    } else {
      MT_MPI_RETURN_IF_ERROR(
          MPI_Iallreduce(MPI_IN_PLACE, b.send, n_in, b.type, MpiOp(op), comm, &r->req_));
    }
    r->started_ = true;
    MpiProgress::Begin();
    r->in_flight_ = true;
    return std::unique_ptr<CommRequest>(std::move(r));
  }

  ~MpiReduceRequest() override {
    WaitIfPending();
    Landed();
  }

 protected:
  absl::StatusOr<bool> DoTest() override {
    if (!started_) return true;  // Only a destructor after a failed Start gets here.
    int flag = 0;
    const int rc = MPI_Test(&req_, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || flag) Landed();
    MT_MPI_RETURN_IF_ERROR(rc);
    if (!flag) return false;
    RETURN_IF_ERROR(Unstage());
    return true;
  }

  absl::Status DoWait() override {
    if (!started_) return absl::OkStatus();
    const int rc = MPI_Wait(&req_, MPI_STATUS_IGNORE);
    Landed();
    MT_MPI_RETURN_IF_ERROR(rc);
    return Unstage();
  }

 private:
  MpiReduceRequest(const TensorView& out, std::string label)
      : CommRequest(std::move(label)), out_(out) {}

  absl::Status Unstage() { return FinishReduce(buffers_, out_); }
  // The collective is no longer in flight (done, or failed): the progress thread may rest.
  void Landed() {
    if (in_flight_) MpiProgress::End();
    in_flight_ = false;
  }

  TensorView out_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool started_ = false;
  bool in_flight_ = false;
  ReduceBuffers buffers_;
  HostStaging stage_in_, stage_out_;
  internal::HostScratch f32_in_, f32_out_;
};

// An MPI_Isend or MPI_Irecv in flight. A send reads t itself (CPU) or a host copy owned by the
// request (CUDA); a receive lands in t itself (CPU) or in a host buffer owned by the request that
// is copied into t when completion is first observed, after checking the received count.
class MpiP2pRequest final : public CommRequest {
 public:
  static absl::StatusOr<std::unique_ptr<CommRequest>> Start(MPI_Comm comm, const TensorView& t,
                                                            int n, int peer, int tag, bool recv,
                                                            std::string label) {
    std::unique_ptr<MpiP2pRequest> r(new MpiP2pRequest(t, n, peer, tag, recv, std::move(label)));
    if (recv) {
      ASSIGN_OR_RETURN(r->host_, HostFor(t, &r->stage_));
      MT_MPI_RETURN_IF_ERROR(MPI_Irecv(r->host_, n, MpiType(t.dtype), peer, tag, comm, &r->req_));
    } else {
      ASSIGN_OR_RETURN(r->host_, StageIn(t, &r->stage_));
      MT_MPI_RETURN_IF_ERROR(MPI_Isend(r->host_, n, MpiType(t.dtype), peer, tag, comm, &r->req_));
    }
    r->started_ = true;
    return std::unique_ptr<CommRequest>(std::move(r));
  }

  ~MpiP2pRequest() override { WaitIfPending(); }

 protected:
  absl::StatusOr<bool> DoTest() override {
    if (!started_) return true;
    int flag = 0;
    MPI_Status status;
    MT_MPI_RETURN_IF_ERROR(MPI_Test(&req_, &flag, &status));
    if (!flag) return false;
    RETURN_IF_ERROR(Complete(status));
    return true;
  }

  absl::Status DoWait() override {
    if (!started_) return absl::OkStatus();
    MPI_Status status;
    MT_MPI_RETURN_IF_ERROR(MPI_Wait(&req_, &status));
    return Complete(status);
  }

 private:
  MpiP2pRequest(const TensorView& t, int n, int peer, int tag, bool recv, std::string label)
      : CommRequest(std::move(label)), t_(t), n_(n), peer_(peer), tag_(tag), recv_(recv) {}

  absl::Status Complete(MPI_Status& status) {
    if (!recv_) return absl::OkStatus();
    int received = 0;
    MT_MPI_RETURN_IF_ERROR(MPI_Get_count(&status, MpiType(t_.dtype), &received));
    if (received != n_) {
      return absl::InvalidArgumentError(absl::StrCat(
          label(), ": received ", received, " elements from rank ", peer_, " (tag ", tag_,
          "), expected ", n_, " for t (", t_.DebugString(), "); sender and receiver must agree"));
    }
    return StageOut(host_, t_);
  }

  TensorView t_;
  int n_, peer_, tag_;
  bool recv_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool started_ = false;
  void* host_ = nullptr;
  HostStaging stage_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, std::string name)
      : Communicator(rank, size, std::move(name)), comm_(comm) {}

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  // Wraps `comm` (owned from now on), returning MPI errors on it instead of aborting.
  static absl::StatusOr<std::unique_ptr<Communicator>> Wrap(MPI_Comm comm, absl::string_view name) {
    MT_MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    int rank = 0, size = 0;
    MT_MPI_RETURN_IF_ERROR(MPI_Comm_rank(comm, &rank));
    MT_MPI_RETURN_IF_ERROR(MPI_Comm_size(comm, &size));
    return std::unique_ptr<Communicator>(new MpiCommunicator(comm, rank, size, std::string(name)));
  }

  absl::string_view backend() const override { return "mpi"; }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key,
                                                      absl::string_view name) override {
    if (color < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(OpLabel("Split"), ": color ", color, " must be >= 0"));
    }
    MPI_Comm sub = MPI_COMM_NULL;
    MT_MPI_RETURN_IF_ERROR(MPI_Comm_split(comm_, color, key, &sub));
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, Wrap(sub, name));
    c->set_call_monitor(call_monitor());
    return c;
  }

 protected:
  absl::Status DoAllReduce(const TensorView& t, ReduceOp op) override {
    ASSIGN_OR_RETURN(const int n, MpiCount(t.numel(), OpLabel("AllReduce")));
    ASSIGN_OR_RETURN(const ReduceBuffers b, StartReduce(t, t, /*scatter=*/false, Staging()));
    MT_MPI_RETURN_IF_ERROR(MPI_Allreduce(MPI_IN_PLACE, b.send, n, b.type, MpiOp(op), comm_));
    return FinishReduce(b, t);
  }

  absl::StatusOr<std::unique_ptr<CommRequest>> DoAllReduceAsync(const TensorView& t,
                                                                ReduceOp op) override {
    return MpiReduceRequest::Start(comm_, t, t, op, /*scatter=*/false, OpLabel("AllReduceAsync"));
  }

  absl::StatusOr<std::unique_ptr<CommRequest>> DoReduceScatterAsync(const TensorView& in,
                                                                    const TensorView& out,
                                                                    ReduceOp op) override {
    return MpiReduceRequest::Start(comm_, in, out, op, /*scatter=*/true,
                                   OpLabel("ReduceScatterAsync"));
  }

  absl::Status DoAllGather(const TensorView& in, const TensorView& out) override {
    ASSIGN_OR_RETURN(const int n, MpiCount(in.numel(), OpLabel("AllGather")));
    ASSIGN_OR_RETURN(void* host_in, StageIn(in, &stage_a_));
    ASSIGN_OR_RETURN(void* host_out, HostFor(out, &stage_b_));
    MT_MPI_RETURN_IF_ERROR(
        MPI_Allgather(host_in, n, MpiType(in.dtype), host_out, n, MpiType(in.dtype), comm_));
    return StageOut(host_out, out);
  }

  absl::Status DoAllGatherLastDim(const TensorView& in, const TensorView& out) override {
    ASSIGN_OR_RETURN(const int n, MpiCount(in.numel(), OpLabel("AllGather")));
    ASSIGN_OR_RETURN(void* host_in, StageIn(in, &stage_a_));
    void* gathered = gather_.Get(out.nbytes());
    MT_MPI_RETURN_IF_ERROR(
        MPI_Allgather(host_in, n, MpiType(in.dtype), gathered, n, MpiType(in.dtype), comm_));
    ASSIGN_OR_RETURN(void* host_out, HostFor(out, &stage_b_));
    const int64_t c = in.dim(-1);
    internal::InterleaveGatheredRows(gathered, host_out, size(), in.numel() / c,
                                     c * DTypeSize(in.dtype));
    return StageOut(host_out, out);
  }

  absl::Status DoReduceScatter(const TensorView& in, const TensorView& out, ReduceOp op) override {
    ASSIGN_OR_RETURN(const int n, MpiCount(out.numel(), OpLabel("ReduceScatter")));
    RETURN_IF_ERROR(MpiCount(in.numel(), OpLabel("ReduceScatter")).status());
    ASSIGN_OR_RETURN(const ReduceBuffers b, StartReduce(in, out, /*scatter=*/true, Staging()));
    MT_MPI_RETURN_IF_ERROR(MPI_Reduce_scatter_block(b.send, b.recv, n, b.type, MpiOp(op), comm_));
    return FinishReduce(b, out);
  }

  absl::Status DoBroadcast(const TensorView& t, int root) override {
    ASSIGN_OR_RETURN(const int n, MpiCount(t.numel(), OpLabel("Broadcast")));
    void* host = nullptr;
    if (rank() == root) {
      ASSIGN_OR_RETURN(host, StageIn(t, &stage_a_));
    } else {
      ASSIGN_OR_RETURN(host, HostFor(t, &stage_a_));
    }
    MT_MPI_RETURN_IF_ERROR(MPI_Bcast(host, n, MpiType(t.dtype), root, comm_));
    if (rank() == root) return absl::OkStatus();
    return StageOut(host, t);
  }

  // Bytes over MPI_BYTE (the dtype does not matter to a copy); counts and displacements in int.
  absl::Status DoAllToAllV(const TensorView& in, absl::Span<const int64_t> send_rows,
                           const TensorView& out, absl::Span<const int64_t> recv_rows) override {
    const std::string label = OpLabel("AllToAllV");
    const int64_t in_row = internal::RowBytes(in), out_row = internal::RowBytes(out);
    std::vector<int> sc(size()), sd(size()), rc(size()), rd(size());
    int64_t so = 0, ro = 0;
    for (int r = 0; r < size(); ++r) {
      ASSIGN_OR_RETURN(sc[r], MpiCount(send_rows[r] * in_row, label));
      ASSIGN_OR_RETURN(rc[r], MpiCount(recv_rows[r] * out_row, label));
      ASSIGN_OR_RETURN(sd[r], MpiCount(so, label));
      ASSIGN_OR_RETURN(rd[r], MpiCount(ro, label));
      so += send_rows[r] * in_row;
      ro += recv_rows[r] * out_row;
    }
    ASSIGN_OR_RETURN(void* host_in, StageIn(in, &stage_a_));
    ASSIGN_OR_RETURN(void* host_out, HostFor(out, &stage_b_));
    MT_MPI_RETURN_IF_ERROR(MPI_Alltoallv(host_in, sc.data(), sd.data(), MPI_BYTE, host_out,
                                         rc.data(), rd.data(), MPI_BYTE, comm_));
    return StageOut(host_out, out);
  }

  absl::Status DoBarrier() override {
    MT_MPI_RETURN_IF_ERROR(MPI_Barrier(comm_));
    return absl::OkStatus();
  }

  absl::Status DoSend(const TensorView& t, int peer, int tag) override {
    ASSIGN_OR_RETURN(const int n, MpiCount(t.numel(), OpLabel("Send")));
    ASSIGN_OR_RETURN(void* host, StageIn(t, &stage_a_));
    MT_MPI_RETURN_IF_ERROR(MPI_Send(host, n, MpiType(t.dtype), peer, tag, comm_));
    return absl::OkStatus();
  }

  bool nonblocking_point_to_point() const override { return true; }

  absl::StatusOr<std::unique_ptr<CommRequest>> DoSendAsync(const TensorView& t, int peer,
                                                           int tag) override {
    const std::string label = OpLabel("SendAsync");
    ASSIGN_OR_RETURN(const int n, MpiCount(t.numel(), label));
    return MpiP2pRequest::Start(comm_, t, n, peer, tag, /*recv=*/false, label);
  }

  absl::StatusOr<std::unique_ptr<CommRequest>> DoRecvAsync(const TensorView& t, int peer,
                                                           int tag) override {
    const std::string label = OpLabel("RecvAsync");
    ASSIGN_OR_RETURN(const int n, MpiCount(t.numel(), label));
    return MpiP2pRequest::Start(comm_, t, n, peer, tag, /*recv=*/true, label);
  }

  absl::Status DoRecv(const TensorView& t, int peer, int tag) override {
    ASSIGN_OR_RETURN(const int n, MpiCount(t.numel(), OpLabel("Recv")));
    ASSIGN_OR_RETURN(void* host, HostFor(t, &stage_a_));
    MPI_Status status;
    MT_MPI_RETURN_IF_ERROR(MPI_Recv(host, n, MpiType(t.dtype), peer, tag, comm_, &status));
    int received = 0;
    MT_MPI_RETURN_IF_ERROR(MPI_Get_count(&status, MpiType(t.dtype), &received));
    if (received != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpLabel("Recv"), ": received ", received, " elements from rank ", peer, " (tag ", tag,
          "), expected ", n, " for t (", t.DebugString(), "); sender and receiver must agree"));
    }
    return StageOut(host, t);
  }

 private:
  // The reused buffers below, as a blocking reduction stages through them.
  ReduceStaging Staging() { return {&stage_a_, &stage_b_, &f32_a_, &f32_b_}; }

  MPI_Comm comm_;
  // Reused host buffers: staging of CUDA inputs/outputs, f32 copies of 16-bit floats, the
  // dim-0 result of a last-dim gather.
  HostStaging stage_a_, stage_b_;
  internal::HostScratch f32_a_, f32_b_, gather_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::Init(int* argc, char*** argv,
                                                             MpiThreads threads) {
  int initialized = 0;
  MT_MPI_RETURN_IF_ERROR(MPI_Initialized(&initialized));
  if (initialized) {
    return absl::FailedPreconditionError(
        "MpiRuntime::Init: MPI is already initialised in this process; create one MpiRuntime "
        "in main() and pass its communicators down");
  }
#ifdef OPEN_MPI
  // OpenMPI's non-blocking all-reduce (coll/libnbc) picks a binomial reduce-then-broadcast
  // schedule for in-place calls (ours) and for fewer than 4 ranks, which moves the data twice:
  // MPI_Iallreduce then costs about twice the blocking MPI_Allreduce. Ask for the reduce-scatter +
  // allgather schedule (3; libnbc falls back to a ring when a tensor has fewer elements than
  // ranks) unless the user chose one (mpirun --mca coll_libnbc_iallreduce_algorithm N sets this
  // variable, which is then left alone). Measured in docs/perf/comm.md.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
#endif
  int provided = 0;
  const int wanted = threads == MpiThreads::kMultiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
  MT_MPI_RETURN_IF_ERROR(MPI_Init_thread(argc, argv, wanted, &provided));
  if (provided < MPI_THREAD_SERIALIZED) {
    LOG(WARNING) << "MPI provides thread level " << provided
                 << " < MPI_THREAD_SERIALIZED: call communicators from the main thread only";
  }
  std::unique_ptr<MpiRuntime> rt(new MpiRuntime());
  rt->thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_rank(MPI_COMM_WORLD, &rt->world_rank_));
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_size(MPI_COMM_WORLD, &rt->world_size_));
  MPI_Comm local = MPI_COMM_NULL;
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt->world_rank_,
                                             MPI_INFO_NULL, &local));
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_rank(local, &rt->local_rank_));
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_size(local, &rt->local_size_));
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_free(&local));
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MT_MPI_RETURN_IF_ERROR(MPI_Get_processor_name(host, &len));
  rt->host_name_.assign(host, len);
  return rt;
}

MpiRuntime::~MpiRuntime() {
  MpiProgress::Stop();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiRuntime::World(absl::string_view name) {
  MPI_Comm dup = MPI_COMM_NULL;
  MT_MPI_RETURN_IF_ERROR(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  return MpiCommunicator::Wrap(dup, name);
}

void MpiRuntime::Abort(const absl::Status& status, int exit_code) {
  if (exit_code == 0) exit_code = 1;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool live = initialized && !finalized;
  int rank = -1, size = 1;
  if (live) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (size == 1) {
    // Nobody to tell: a one-line error and the exit code, without OpenMPI's MPI_ABORT banner.
    std::fprintf(stderr, "fatal: %s\n", status.ToString().c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(exit_code);
  }
  std::fprintf(stderr, "[rank %d] fatal: %s; aborting the job\n", rank, status.ToString().c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace comm
}  // namespace mt
