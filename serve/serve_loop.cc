#include "serve/serve_loop.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace serve {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// What every rank contributes to a round (summed over the ranks).
struct Header {
  int64_t stop_votes = 0;
  int64_t events = 0;  // Rank 0: new and cancelled jobs it announces.
  int64_t bytes = 0;   // Rank 0: the size of their serialized text.
};

// Sums the headers of all ranks: a plain all-reduce when `blocking`, else a non-blocking one
// polled with short sleeps. Every rank makes the same choice (the engines agree on being idle).
absl::StatusOr<Header> Exchange(comm::Communicator& world, const Header& mine, bool blocking) {
  Tensor t = Tensor::Host({3}, DType::kI64);
  int64_t* v = t.data_as<int64_t>();
  v[0] = mine.stop_votes;
  v[1] = mine.events;
  v[2] = mine.bytes;
  if (blocking) {
    RETURN_IF_ERROR(world.AllReduce(t.view(), comm::ReduceOp::kSum));
    return Header{v[0], v[1], v[2]};
  }
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

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One rank's loop state.
class Loop {
 public:
  Loop(comm::Communicator& world, const InferenceSession& session, const data::Tokenizer& tokenizer,
       JobQueue* queue, const ServeLoopOptions& options, std::atomic<int64_t>* served,
       BatchEngine& engine)
      : world_(world),
        session_(session),
        tokenizer_(tokenizer),
        queue_(queue),
        options_(options),
        served_(served),
        engine_(engine) {}

  absl::Status Run(const std::atomic<bool>& stop) {
    while (true) {
      std::vector<std::unique_ptr<Job>> taken;
      const std::string text = queue_ != nullptr ? CollectEvents(&taken) : std::string();
      Header mine;
      mine.stop_votes = stop.load() ? 1 : 0;
      mine.events = text.empty() ? 0 : 1;
      mine.bytes = static_cast<int64_t>(text.size());
      ASSIGN_OR_RETURN(const Header round, Exchange(world_, mine, !engine_.idle()));
      if (round.stop_votes > 0) {
        for (auto& job : taken) jobs_[next_id_++].job = std::move(job);
        AnswerAll(absl::UnavailableError("the server is shutting down"));
        return absl::OkStatus();
      }
      if (round.events > 0) {
        ASSIGN_OR_RETURN(const std::string received, BroadcastText(world_, text, round.bytes));
        RETURN_IF_ERROR(Apply(received, std::move(taken)));
      }
      if (engine_.idle()) continue;
      const absl::Status s = RunStep();
      if (!s.ok()) {
        const absl::Status failed(s.code(), absl::StrCat("generation failed: ", s.message()));
        AnswerAll(failed);
        return failed;
      }
    }
  }

 private:
  struct InFlight {
    std::unique_ptr<Job> job;
    Clock::time_point last_token;
    bool started = false;
  };

  // Rank 0: jobs taken from the queue while the engine has room for them to wait (or, idle,
  // after up to `poll` for one), and the requests whose client has gone, as text ("" for none).
  std::string CollectEvents(std::vector<std::unique_ptr<Job>>* taken) {
    std::chrono::milliseconds wait = engine_.idle() ? options_.poll : std::chrono::milliseconds(0);
    if (HoldFileExists(options_.hold_file)) {
      if (engine_.idle()) std::this_thread::sleep_for(options_.poll);
    } else {
      while (engine_.waiting() + static_cast<int64_t>(taken->size()) <
             options_.batch.max_batch_size) {
        std::unique_ptr<Job> job = queue_->Pop(wait);
        if (job == nullptr) break;
        if (job->cancelled->load()) {  // Its client went away while it waited.
          job->result.set_value({absl::CancelledError("the client went away"), {}});
          if (job->on_answer) job->on_answer();
          continue;
        }
        taken->push_back(std::move(job));
        wait = std::chrono::milliseconds(0);
      }
      // A hold that began while waiting applies to them too.
      if (HoldFileExists(options_.hold_file)) {
        for (auto it = taken->rbegin(); it != taken->rend(); ++it)
          queue_->PushFront(std::move(*it));
        taken->clear();
      }
    }
    Json cancel = Json::array(), added = Json::array();
    for (const auto& [id, f] : jobs_) {
      if (f.job->cancelled->load()) cancel.push_back(id);
    }
    // Requests that can start at once are not refused (none while held).
    const int64_t busy =
        engine_.running() + engine_.waiting() + static_cast<int64_t>(taken->size());
    queue_->set_spare(
        HoldFileExists(options_.hold_file)
            ? 0
            : static_cast<size_t>(std::max<int64_t>(0, options_.batch.max_batch_size - busy)));
    for (const auto& job : *taken) added.push_back(SerializeRequest(job->request));
    if (cancel.empty() && added.empty()) return std::string();
    return Json{{"new", added}, {"cancel", cancel}}.dump();
  }

  // Every rank: the events of rank 0's text into the engine (rank 0 keeps `taken`).
  absl::Status Apply(const std::string& text, std::vector<std::unique_ptr<Job>> taken) {
    const Json o = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!o.is_object() || !o.contains("new") || !o.contains("cancel")) {
      return absl::InternalError("the serve loop received events it did not send");
    }
    for (const Json& id : o["cancel"]) {
      engine_.Cancel(id.get<int64_t>());
      requests_.erase(id.get<int64_t>());
      Answer(id.get<int64_t>(), {absl::CancelledError("the client went away"), {}},
             RequestOutcome::kCancelled);
    }
    for (size_t i = 0; i < o["new"].size(); ++i) {
      const int64_t id = next_id_++;
      if (i < taken.size()) jobs_[id].job = std::move(taken[i]);
      ASSIGN_OR_RETURN(GenerationRequest r, DeserializeRequest(o["new"][i].get<std::string>()));
      const GenerationRequest& held = requests_[id] = std::move(r);
      const absl::Status added =
          engine_.Add(id, held.prompts, held.config, StopStrings(held, tokenizer_));
      if (!added.ok()) {
        requests_.erase(id);
        Answer(id, {added, {}}, RequestOutcome::kError);
      }
    }
    return absl::OkStatus();
  }

  // Every rank: one engine step; rank 0 streams its tokens and answers the finished requests.
  absl::Status RunStep() {
    ASSIGN_OR_RETURN(StepReport report, engine_.Step(session_.Step()));
    const Clock::time_point now = Clock::now();
    if (options_.metrics != nullptr) {
      options_.metrics->Step(report.sequences, engine_.running(),
                             static_cast<int64_t>(report.tokens.size()));
    }
    for (const TokenEvent& t : report.tokens) {
      auto it = jobs_.find(t.request);
      if (it == jobs_.end()) continue;
      InFlight& f = it->second;
      if (options_.metrics != nullptr) {
        if (!f.started) options_.metrics->FirstToken(Seconds(now - f.job->queued));
        if (f.started) options_.metrics->TokenGap(Seconds(now - f.last_token));
      }
      f.started = true;
      f.last_token = now;
      if (f.job->on_token) f.job->on_token(t);
    }
    for (int64_t id : report.finished) {
      std::vector<Generation> out = engine_.TakeResult(id);
      requests_.erase(id);
      Answer(id, {absl::OkStatus(), std::move(out)}, RequestOutcome::kOk);
    }
    return absl::OkStatus();
  }

  // Rank 0: the job of request `id` (if it has one) gets `result`.
  void Answer(int64_t id, JobResult result, RequestOutcome outcome) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    if (options_.metrics != nullptr) {
      options_.metrics->Answered(outcome, Seconds(Clock::now() - it->second.job->queued));
    }
    it->second.job->result.set_value(std::move(result));
    if (it->second.job->on_answer) it->second.job->on_answer();
    served_->fetch_add(1);
    jobs_.erase(it);
  }

  void AnswerAll(const absl::Status& status) {
    while (!jobs_.empty()) Answer(jobs_.begin()->first, {status, {}}, RequestOutcome::kError);
  }

  comm::Communicator& world_;
  const InferenceSession& session_;
  const data::Tokenizer& tokenizer_;
  JobQueue* queue_;
  const ServeLoopOptions& options_;
  std::atomic<int64_t>* served_;
  BatchEngine& engine_;
  std::map<int64_t, GenerationRequest> requests_;  // In the engine (StopStrings refer to them).
  std::map<int64_t, InFlight> jobs_;               // Rank 0: their jobs.
  int64_t next_id_ = 0;
};

}  // namespace

bool HoldFileExists(const std::string& hold_file) {
  std::error_code ec;
  return !hold_file.empty() && std::filesystem::exists(hold_file, ec);
}

absl::Status RunServeLoop(comm::Communicator& world, const InferenceSession& session,
                          const data::Tokenizer& tokenizer, JobQueue* queue,
                          const ServeLoopOptions& options, const std::atomic<bool>& stop,
                          std::atomic<int64_t>* served) {
  ASSIGN_OR_RETURN(std::unique_ptr<BatchEngine> engine,
                   BatchEngine::Create(session.Step(), *session.model, options.batch));
  Loop loop(world, session, tokenizer, queue, options, served, *engine);
  return loop.Run(stop);
}

}  // namespace serve
}  // namespace mt
