#include "serve/serve_loop.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mt {
namespace serve {

namespace {

// What every rank contributes to a round (summed over the ranks).
struct Header {
  int64_t stop_votes = 0;
  int64_t job = 0;    // Rank 0: 1 when it announces a job.
  int64_t bytes = 0;  // Rank 0: the size of the job's serialized request.
};

// Sums the headers of all ranks, polling a non-blocking all-reduce with short sleeps.
absl::StatusOr<Header> Exchange(comm::Communicator& world, const Header& mine) {
  Tensor t = Tensor::Host({3}, DType::kI64);
  int64_t* v = t.data_as<int64_t>();
  v[0] = mine.stop_votes;
  v[1] = mine.job;
  v[2] = mine.bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<comm::CommRequest> request,
                   world.AllReduceAsync(t.view(), comm::ReduceOp::kSum));
  while (true) {
    ASSIGN_OR_RETURN(const bool done, request->Test());
    if (done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Header{v[0], v[1], v[2]};
}

// Rank 0's `text` (of `bytes` bytes) on every rank, as i32 words.
absl::StatusOr<std::string> BroadcastText(comm::Communicator& world, const std::string& text,
                                          int64_t bytes) {
  std::vector<int32_t> words((bytes + 3) / 4, 0);
  if (world.rank() == 0) std::memcpy(words.data(), text.data(), text.size());
  RETURN_IF_ERROR(world.Broadcast(
      TensorView(words.data(), {static_cast<int64_t>(words.size())}, DType::kI32), 0));
  return std::string(reinterpret_cast<const char*>(words.data()), bytes);
}

bool Held(const std::string& hold_file) {
  std::error_code ec;
  return !hold_file.empty() && std::filesystem::exists(hold_file, ec);
}

}  // namespace

absl::Status RunServeLoop(comm::Communicator& world, const InferenceSession& session,
                          const data::Tokenizer& tokenizer, JobQueue* queue,
                          const ServeLoopOptions& options, const std::atomic<bool>& stop,
                          std::atomic<int64_t>* served) {
  while (true) {
    std::unique_ptr<Job> job;
    if (queue != nullptr && !Held(options.hold_file)) {
      job = queue->Pop(options.poll);
      // A hold that began while waiting for the job applies to it too.
      if (job != nullptr && Held(options.hold_file)) queue->PushFront(std::move(job));
    } else if (queue != nullptr) {
      std::this_thread::sleep_for(options.poll);
    }
    const std::string text = job != nullptr ? SerializeRequest(job->request) : std::string();
    Header mine;
    mine.stop_votes = stop.load() ? 1 : 0;
    mine.job = job != nullptr ? 1 : 0;
    mine.bytes = static_cast<int64_t>(text.size());
    ASSIGN_OR_RETURN(const Header round, Exchange(world, mine));
    if (round.stop_votes > 0) {
      if (job != nullptr) {
        job->result.set_value({absl::UnavailableError("the server is shutting down"), {}});
      }
      return absl::OkStatus();
    }
    if (round.job == 0) continue;
    ASSIGN_OR_RETURN(const std::string received, BroadcastText(world, text, round.bytes));
    ASSIGN_OR_RETURN(const GenerationRequest request, DeserializeRequest(received));
    absl::StatusOr<std::vector<Generation>> out =
        Generate(session.Step(), *session.model, request.prompts, request.config,
                 StopStrings(request, tokenizer));
    if (job != nullptr) {
      JobResult result{out.status(), {}};
      if (out.ok()) result.generations = std::move(out).value();
      job->result.set_value(std::move(result));
      served->fetch_add(1);
    }
    if (!out.ok() && !absl::IsInvalidArgument(out.status())) {
      return absl::Status(out.status().code(),
                          absl::StrCat("generation failed: ", out.status().message()));
    }
  }
}

}  // namespace serve
}  // namespace mt
