// Communicator: collectives and point-to-point messages over a fixed group of ranks.
//
// A Communicator is an object (never a global): the world communicator comes from a backend
// (MpiRuntime::World() in comm/mpi_communicator.h), sub-communicators from Split(). Every call is
// COLLECTIVE over the group unless it says otherwise: all ranks of the group must make the same
// calls in the same order with matching shapes and dtypes. A mismatch BETWEEN ranks (different
// sizes on different ranks) cannot always be detected and may hang or corrupt data; everything a
// rank can check locally is checked before any data moves and returned as a Status:
//
//   InvalidArgument  a view that is not contiguous, has no data, has the wrong shape for the call,
//                    mixes dtypes or devices, or a root/peer that is not a rank of the group;
//   Unimplemented    a dtype the call does not support (u16 sums), a device the backend cannot
//                    reach (CUDA tensors in a CPU-only build);
//   Internal         the backend failed (the MPI or NCCL error text is included);
//   DeadlineExceeded a backend wait ran past its timeout (NCCL); the communicator is then aborted
//                    and every later call returns FailedPrecondition.
//
// A failed call has done nothing this rank can rely on; the process should end the job through a
// clean abort path (MpiRuntime::Abort), because its peers may be blocked in the same collective.
//
// Dtypes: f32, bf16, f16, i32 and i64 for every call; u16 for the calls that only move data
// (gathers, broadcast, send/recv). Reductions (kSum, kMax) of bf16 and f16 are computed in f32 and
// rounded once to the 16-bit type at the end by the MPI backend (convert, reduce, convert back),
// so a sum over n ranks has relative error about u16 + (n-1) * u32; NCCL reduces natively in the
// 16-bit type (error up to about (n-1) * u16). Integer sums are exact (wrapping on overflow).
//
// All calls are synchronous except the *Async ones: when a call returns, its output is complete and
// its input may be reused. Views on the CPU and on CUDA devices are accepted by both backends (see
// their headers for how each one moves the data). A Communicator is not thread-safe: one thread at
// a time, and the same thread for a communicator and its pending CommRequests.
//
// Non-blocking all-reduce (to overlap the data-parallel gradient all-reduce with the backward
// pass; ReduceScatterAsync likewise for the distributed optimizer): AllReduceAsync starts the
// collective and returns a CommRequest at once; the result is in the tensor once Test() returns
// true or Wait() returns OK. It is matched like AllReduce: every rank starts the same calls in the
// same order, with blocking and non-blocking calls on the same communicator interleaved
// identically; several requests may be outstanding at once, on this and on other communicators.
// Whether the transfer really progresses while the caller computes is the backend's affair: NCCL
// runs it on its own stream; OpenMPI progresses non-blocking collectives only inside MPI calls, so
// call Test() now and then (e.g. after each layer's backward) to move it along; a backend without a
// non-blocking path completes the call inside AllReduceAsync.
//
// Every communicator counts the calls it has issued, per kind (counters()); nn/ tests assert on
// them (a transformer layer performs exactly two all-reduces forward and two backward). A call is
// counted when its arguments have been validated and it is handed to the backend, so calls
// rejected with InvalidArgument/Unimplemented are not counted. Counters belong to one
// communicator; sub-communicators from Split() start at zero.
#ifndef MT_COMM_COMMUNICATOR_H_
#define MT_COMM_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace mt {
namespace comm {

enum class ReduceOp { kSum, kMax };
// "sum", "max".
absl::string_view ReduceOpName(ReduceOp op);

// Which dimension AllGather concatenates along.
enum class GatherAxis {
  kFirst,  // in [m, ...] -> out [size * m, ...]: rank r's rows land at [r * m, (r + 1) * m).
  kLast,   // in [..., c] -> out [..., size * c]: rank r's columns land at [r * c, (r + 1) * c).
};

// Per-kind call counts of one communicator (see the file comment for what is counted).
struct CommCounters {
  int64_t all_reduce = 0;
  int64_t all_gather = 0;
  int64_t reduce_scatter = 0;
  int64_t broadcast = 0;
  int64_t barrier = 0;
  int64_t send = 0;
  int64_t recv = 0;
  int64_t all_to_all = 0;
  // Payload bytes of this rank's inputs over all counted calls (an all-gather counts its input,
  // a reduce-scatter its whole input, a barrier nothing).
  int64_t bytes = 0;

  // Number of calls of all kinds.
  int64_t calls() const;
  // "all_reduce=2 all_gather=0 ... bytes=96".
  std::string DebugString() const;
  friend bool operator==(const CommCounters& a, const CommCounters& b);
  friend bool operator!=(const CommCounters& a, const CommCounters& b) { return !(a == b); }
};

// Where the communicator calls of one process stand, for a watchdog on another thread
// (comm/watchdog.h) to read. A communicator given one (Communicator::set_call_monitor; Split()
// passes it on to the new communicator) records each blocking call from entry to return: the
// collectives, Send/Recv, CommRequest::Wait (not Test, which returns at once). Nested calls (a
// backend calling another communicator) count as one. Enter/Leave come from the thread that owns
// the communicators; Read from any thread.
class CallMonitor {
 public:
  struct Snapshot {
    int64_t calls = 0;           // Outermost calls entered so far.
    bool in_call = false;        // Whether a call is running now.
    double seconds_in_call = 0;  // How long it has been running (0 when none is).
    const char* op = "";         // "AllReduce", "Wait", ...: the running or the last call.
    // All the time spent in calls so far, the running one's included: what the caller waited
    // for its peers plus the transfers (a straggler's peers wait the longest).
    double seconds_in_calls = 0;
  };
  void Enter(const char* op);
  void Leave();
  Snapshot Read() const;

 private:
  int depth_ = 0;  // Owner thread only.
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> entered_ns_{0};  // steady_clock time of the running call's entry; 0: none.
  std::atomic<const char*> op_{""};
  std::atomic<int64_t> finished_ns_{0};  // Of the calls that have returned.
};

class Communicator;

// A pending collective started by an *Async call (Communicator::AllReduceAsync), owned by the
// caller (through the unique_ptr the call returns). Not thread-safe; use it on the thread that
// uses its communicator.
//
// Lifetime: the tensor of the call must stay alive, and must not be read or written, until the
// request has completed (Test() returned true, or Wait() returned) or has been destroyed. A request
// must be completed or destroyed before its communicator is destroyed (the communicator
// CHECK-fails otherwise).
//
// Errors (from Test or Wait): Internal when the backend failed, DeadlineExceeded when a bounded
// wait ran out (NCCL), FailedPrecondition when the communicator was aborted meanwhile; then the
// tensor's contents are undefined and the job should end (MpiRuntime::Abort). Once a request has
// completed or failed, later Test/Wait calls return the same outcome without touching the backend.
class CommRequest {
 public:
  // A request that has not completed is waited for first (an error is logged), so destroying one
  // never leaves a collective pending in MPI or NCCL, and the result still lands in the tensor.
  virtual ~CommRequest();
  CommRequest(const CommRequest&) = delete;
  CommRequest& operator=(const CommRequest&) = delete;

  // Does not block: true once the collective has completed (the tensor then holds the result),
  // false while it is still running. Drives the backend's progress (MPI_Test).
  absl::StatusOr<bool> Test();
  // Blocks until the collective has completed (NCCL: bounded by NcclOptions::timeout).
  absl::Status Wait();
  // True once Test() or Wait() has reported completion or an error.
  bool done() const { return done_; }

 protected:
  explicit CommRequest(std::string label);

  // The backend's part, called only while !done(). DoTest returns true once the collective has
  // completed and its result is in the caller's tensor; DoWait blocks until then. After either
  // has reported completion or an error, neither is called again.
  virtual absl::StatusOr<bool> DoTest() = 0;
  virtual absl::Status DoWait() = 0;

  // Subclasses whose requests can be pending call this first in their destructor: it waits for a
  // request that has not completed and logs an error if that fails.
  void WaitIfPending();

  // "Communicator::AllReduceAsync (mpi 'dp', rank 0 of 2)", for error messages.
  const std::string& label() const { return label_; }

 private:
  friend class Communicator;
  // Records the outcome and releases the communicator's count of pending requests.
  void Finish(absl::Status status);

  std::string label_;
  bool done_ = false;
  absl::Status status_;
  Communicator* owner_ = nullptr;  // Counts this request as pending until it is done.
};

class Communicator {
 public:
  // CHECK-fails while a CommRequest of this communicator is alive and not done.
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This rank's index in the group, in [0, size()).
  int rank() const { return rank_; }
  // Number of ranks in the group (>= 1).
  int size() const { return size_; }
  // The backend: "mpi" or "nccl".
  virtual absl::string_view backend() const = 0;
  // The label given at creation ("world", "tp", ...; may be empty), used in error messages.
  const std::string& name() const { return name_; }
  // "mpi communicator 'tp' (rank 1 of 2)".
  std::string DebugString() const;

  // t <- op over ranks of t, in place, on every rank. t: any shape.
  absl::Status AllReduce(const TensorView& t, ReduceOp op);

  // Starts t <- op over ranks of t (in place) and returns at once with a request that completes
  // the call (see CommRequest and the file comment). Validation, errors, counting (as an
  // all_reduce, with t's bytes) and matching are those of AllReduce; errors found before the
  // collective starts are returned here, later ones by the request.
  absl::StatusOr<std::unique_ptr<CommRequest>> AllReduceAsync(const TensorView& t, ReduceOp op);

  // out <- the concatenation of every rank's `in` in rank order, along `axis`:
  //   kFirst: in [m, d1, ...], out [size * m, d1, ...];
  //   kLast:  in [d0, ..., c], out [d0, ..., size * c] (what tensor-parallel gathers need).
  // in: rank >= 1; out: same dtype and device, must not overlap in.
  absl::Status AllGather(const TensorView& in, const TensorView& out,
                         GatherAxis axis = GatherAxis::kFirst);

  // out <- rows [rank * m, (rank + 1) * m) of (op over ranks of in).
  // in [size * m, d1, ...], out [m, d1, ...]; same dtype and device, not overlapping.
  absl::Status ReduceScatter(const TensorView& in, const TensorView& out,
                             ReduceOp op = ReduceOp::kSum);

  // Starts ReduceScatter and returns at once with a request that completes it (CommRequest: `in`
  // must not be written, nor `out` read, until then). Validation, errors, counting (as a
  // reduce_scatter) and matching are those of ReduceScatter, as AllReduceAsync's are AllReduce's.
  absl::StatusOr<std::unique_ptr<CommRequest>> ReduceScatterAsync(const TensorView& in,
                                                                  const TensorView& out,
                                                                  ReduceOp op = ReduceOp::kSum);

  // t <- root's t on every rank. root in [0, size()).
  absl::Status Broadcast(const TensorView& t, int root);

  // Each rank sends a block of rows to every rank (itself included) and receives one from each:
  // in [sum(send_rows), d1, ...] holds, in rank order, the send_rows[r] rows for rank r;
  // out [sum(recv_rows), d1, ...] gets, in rank order, the recv_rows[r] rows rank r sent here
  // (the mixture-of-experts dispatch). send_rows and recv_rows have size() entries >= 0, and
  // recv_rows[r] must be what rank r's send_rows says for this rank (exchange the counts first,
  // e.g. with AllGather); a block may be empty. in and out: rank >= 1, the same trailing
  // dimensions, dtype and device, not overlapping; any dtype. Counted as one all_to_all with in's
  // bytes. InvalidArgument for counts that do not fit the shapes.
  absl::Status AllToAllV(const TensorView& in, absl::Span<const int64_t> send_rows,
                         const TensorView& out, absl::Span<const int64_t> recv_rows);

  // Returns once every rank of the group has entered the barrier.
  absl::Status Barrier();

  // Point-to-point (NOT collective: only the two ranks involved take part). Send blocks until `t`
  // may be reused; Recv blocks until `t` holds the message. The receiver's view must have the
  // sender's byte size (a mismatch is an error on the receiver, or a truncation error). Messages
  // between one pair with the same tag arrive in order; tag >= 0. peer != rank().
  absl::Status Send(const TensorView& t, int peer, int tag = 0);
  absl::Status Recv(const TensorView& t, int peer, int tag = 0);
  // Non-blocking Send/Recv (pipeline stages exchanging activations both ways at once): start the
  // call and return a request that completes it (CommRequest: `t` must stay alive, and not be
  // written (SendAsync) or read (RecvAsync), until it has completed). Validation, errors,
  // counting (as a send / a recv) and matching are those of Send/Recv. Requests of a
  // communicator may complete in any order. A backend without non-blocking point-to-point
  // (nonblocking_point_to_point() false) completes the call inside SendAsync/RecvAsync.
  absl::StatusOr<std::unique_ptr<CommRequest>> SendAsync(const TensorView& t, int peer,
                                                         int tag = 0);
  absl::StatusOr<std::unique_ptr<CommRequest>> RecvAsync(const TensorView& t, int peer,
                                                         int tag = 0);
  // Whether SendAsync/RecvAsync return before the peer has matched them (MPI: true).
  virtual bool nonblocking_point_to_point() const { return false; }

  // A communicator over the ranks of this group that pass the same `color` (>= 0), ordered by
  // `key` (ties by rank in this group), with its own counters; the same backend as this one.
  // Collective over this group. `name` labels the new communicator.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key,
                                                              absl::string_view name) = 0;

  const CommCounters& counters() const { return counters_; }
  // Requests from the *Async calls that are alive and not done.
  int64_t pending_requests() const { return pending_requests_; }
  // Returns the counters and zeroes them.
  CommCounters ResetCounters();

  // Records this communicator's blocking calls in `monitor` (null: none; not owned, must outlive
  // the communicator). Communicators made by Split() afterwards get the same monitor.
  void set_call_monitor(CallMonitor* monitor) { monitor_ = monitor; }
  CallMonitor* call_monitor() const { return monitor_; }

 protected:
  Communicator(int rank, int size, std::string name);

  // The backend. Arguments have been validated and counted: shapes consistent, views contiguous
  // and non-null (unless empty), in/out with one dtype and one device and not overlapping, the
  // dtype allowed for the call, root/peer in range. Backends must also handle size() == 1 and
  // empty tensors, and check the device themselves (which devices they reach is theirs to say).
  virtual absl::Status DoAllReduce(const TensorView& t, ReduceOp op) = 0;
  // Starts DoAllReduce's collective without waiting for it. The default, for backends that
  // cannot overlap, runs DoAllReduce to completion and returns an already-completed request.
  virtual absl::StatusOr<std::unique_ptr<CommRequest>> DoAllReduceAsync(const TensorView& t,
                                                                        ReduceOp op);
  // Gathers along the first dimension (equivalently: concatenates the flat byte ranges).
  virtual absl::Status DoAllGather(const TensorView& in, const TensorView& out) = 0;
  // Gathers along the last dimension: in viewed as [rows, c], out as [rows, size * c].
  virtual absl::Status DoAllGatherLastDim(const TensorView& in, const TensorView& out) = 0;
  virtual absl::Status DoReduceScatter(const TensorView& in, const TensorView& out,
                                       ReduceOp op) = 0;
  // Starts DoReduceScatter's collective without waiting; the default completes it first.
  virtual absl::StatusOr<std::unique_ptr<CommRequest>> DoReduceScatterAsync(const TensorView& in,
                                                                            const TensorView& out,
                                                                            ReduceOp op);
  virtual absl::Status DoBroadcast(const TensorView& t, int root) = 0;
  // send_rows / recv_rows: size() counts each, checked against the shapes (the blocks follow one
  // another; internal::RowBytes gives a row's bytes).
  virtual absl::Status DoAllToAllV(const TensorView& in, absl::Span<const int64_t> send_rows,
                                   const TensorView& out, absl::Span<const int64_t> recv_rows) = 0;
  virtual absl::Status DoBarrier() = 0;
  virtual absl::Status DoSend(const TensorView& t, int peer, int tag) = 0;
  virtual absl::Status DoRecv(const TensorView& t, int peer, int tag) = 0;
  // Start DoSend's / DoRecv's transfer without waiting. The defaults, for backends that cannot,
  // run DoSend / DoRecv to completion and return an already-completed request.
  virtual absl::StatusOr<std::unique_ptr<CommRequest>> DoSendAsync(const TensorView& t, int peer,
                                                                   int tag);
  virtual absl::StatusOr<std::unique_ptr<CommRequest>> DoRecvAsync(const TensorView& t, int peer,
                                                                   int tag);

  // "Communicator::AllReduce (mpi 'tp', rank 1 of 2)": the prefix of every error message.
  std::string OpLabel(absl::string_view op) const;

 private:
  // Validates a point-to-point call's arguments and counts it (a send unless `recv`).
  absl::Status CheckAndCountP2p(const std::string& label, const TensorView& t, int peer, int tag,
                                bool recv);
  // Validates a reduce-scatter's arguments and counts it.
  absl::Status CheckAndCountReduceScatter(const std::string& label, const TensorView& in,
                                          const TensorView& out);
  // Counts a request from an *Async call as pending until it is done.
  void Adopt(CommRequest* request);

  int rank_;
  int size_;
  std::string name_;
  CommCounters counters_;
  int64_t pending_requests_ = 0;
  CallMonitor* monitor_ = nullptr;
  friend class CommRequest;
};

// Host-side helpers shared by the backends.
namespace internal {

// Bytes of one row (one index of dimension 0) of a contiguous t; 0 for t without rows.
int64_t RowBytes(const TensorView& t);

// A request whose collective has already completed (Test() is true at once).
std::unique_ptr<CommRequest> CompletedRequest(std::string label);

// Rearranges a dim-0 gather of `size` blocks of [rows, row_bytes] (src, contiguous) into a
// last-dim gather [rows, size * row_bytes] (dst). src and dst must not overlap.
void InterleaveGatheredRows(const void* src, void* dst, int size, int64_t rows, size_t row_bytes);

// A grow-only host buffer reused across calls (so that steady-state collectives do not allocate).
class HostScratch {
 public:
  // At least `nbytes` bytes, 64-byte aligned; the contents are undefined after growth.
  void* Get(size_t nbytes);

 private:
  std::unique_ptr<char[]> owned_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace internal

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_COMMUNICATOR_H_
