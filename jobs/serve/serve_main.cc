// The generation server: Megatron-LM's text generation API (PUT /api) and OpenAI's completions
// (POST /v1/completions) over HTTP, for a trained GPT checkpoint at its tensor-parallel degree.
//
//   bazel-bin/jobs/serve/serve --load=CKPT --port=5000
//   mpirun -np 2 bazel-bin/jobs/serve/serve --load=CKPT_TP2 --port=5000
//   curl -X PUT localhost:5000/api -d '{"prompts": ["Hello"], "tokens_to_generate": 32}'
//
// Rank 0 listens (on 127.0.0.1 unless --host says otherwise; --port=0 picks a free port) and
// prints "serving ... at http://HOST:PORT" once it does. Its handler threads parse and check each
// request (serve/serve_api.h: 400 with a JSON error naming the field; 413 for a body over
// --max_body_bytes; 404 for other paths), queue it (503 when --queue_size requests wait), and
// wait for its result, or stream its tokens as server-sent events ("stream": true,
// serve/serve_stream.h); the main thread of every rank runs the generation loop
// (serve/serve_loop.h) with continuous batching (serve/batch_engine.h): up to --max_batch_size
// sequences and --max_batched_tokens tokens per step, requests joining and leaving between steps,
// on every TP rank in lockstep. Sockets time out after --timeout_s without progress, and only
// handler threads touch them, so a slow or vanished client holds its own handler thread, never
// the generation; a streaming client that disconnects frees its cache slot at the next step.
// GET /healthz answers {"queued": N, "served": N}, GET /metrics Prometheus' text format
// (serve/serve_metrics.h), GET /v1/models the model. SIGTERM or SIGINT to any rank stops every
// rank; requests in flight or queued get 503. Bad flags print one line and exit 1; a failure after
// start-up ends every rank (MpiRuntime::Abort).
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/mpi_main.h"
#include "core/config_flags.h"
#include "core/status.h"
#include "data/tokenizers/factory.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "serve/inference.h"
#include "serve/serve_api.h"
#include "serve/serve_loop.h"
#include "serve/serve_metrics.h"
#include "serve/serve_queue.h"
#include "serve/serve_stream.h"

namespace mt {
namespace jobs {

using serve::Api;
using serve::ErrorJson;
using serve::GenerationRequest;
using serve::HttpStatus;
using serve::InferenceConfig;
using serve::InferenceSession;
using serve::JobQueue;
using serve::JobResult;
using serve::LoadForInference;
using serve::ParseRequest;
using serve::ResponseJson;
using serve::RunServeLoop;
using serve::ServeLimits;
using serve::ServeLoopOptions;
namespace {

struct ServeConfig {
  InferenceConfig inference;
  std::string host = "127.0.0.1";
  int port = 5000;
  int64_t max_body_bytes = int64_t{1} << 20;
  int64_t max_tokens_per_request = 8192;
  int max_prompts = 128;
  int queue_size = 16;
  int max_batch_size = 16;
  int64_t max_batched_tokens = 2048;
  bool batch_invariant = true;
  int timeout_s = 10;
  std::string hold_file;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    InferenceConfig::Fields(self.inference, v);
    v("host", &self.host, "Address to listen on (rank 0).");
    v("port", &self.port, "Port to listen on (0: any free port, printed).");
    v("max_body_bytes", &self.max_body_bytes, "Largest request body (larger: 413).");
    v("max_tokens_per_request", &self.max_tokens_per_request,
      "Most positions one request may ask for: the sum over its prompts of prompt tokens plus "
      "tokens to generate (more: 400).");
    v("max_prompts", &self.max_prompts, "Most prompts in one request.");
    v("queue_size", &self.queue_size, "Requests that may wait for generation (more: 503).");
    v("max_batch_size", &self.max_batch_size,
      "Sequences generated together (continuous batching; each holds a key/value cache slot).");
    v("max_batched_tokens", &self.max_batched_tokens,
      "Tokens one step may run: prompts joining plus one per running sequence (a longer prompt "
      "joins in a step of its own).");
    v("batch_invariant", &self.batch_invariant,
      "Compute each sequence's GEMM rows alone (CPU), so that a request gets the same bits "
      "batched as alone; false: the BLAS (faster for long prompts, near-ties may differ).");
    v("timeout_s", &self.timeout_s,
      "Seconds a client socket may make no progress (reading a request, writing a response).");
    v("hold_file", &self.hold_file,
      "While this file exists, queued requests wait (for tests and maintenance).");
  }

  absl::Status Validate() const {
    if (port < 0 || port > 65535) return absl::InvalidArgumentError("--port must be in [0, 65535]");
    if (max_body_bytes < 1 || max_tokens_per_request < 1 || max_prompts < 1 || queue_size < 1 ||
        timeout_s < 1 || max_batch_size < 1 || max_batched_tokens < 1) {
      return absl::InvalidArgumentError(
          "--max_body_bytes, --max_tokens_per_request, --max_prompts, --queue_size, "
          "--max_batch_size, --max_batched_tokens and --timeout_s must be >= 1");
    }
    return absl::OkStatus();
  }
};

// Rank 0's HTTP side: handler threads that parse, queue and answer requests.
class FrontEnd {
 public:
  FrontEnd(const ServeConfig& c, const data::Tokenizer& tokenizer, JobQueue& queue,
           const ServeLimits& limits, std::string model, const std::atomic<int64_t>& served,
           const serve::ServeMetrics& metrics)
      : c_(c),
        tokenizer_(tokenizer),
        queue_(queue),
        limits_(limits),
        model_(std::move(model)),
        served_(served),
        metrics_(metrics),
        seed_(std::random_device()() * 0x9E3779B97F4A7C15ull) {}

  // Binds and starts listening; returns the port.
  absl::StatusOr<int> Start() {
    Configure();
    const int port = c_.port == 0 ? server_.bind_to_any_port(c_.host)
                                  : (server_.bind_to_port(c_.host, c_.port) ? c_.port : -1);
    if (port < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", c_.host, ":", c_.port, " (in use, or a bad --host?)"));
    }
    // cpp-httplib listens with a backlog of 5: a burst of clients would overflow it and wait for
    // their SYN's retransmission (a second). Listening again on Linux only resizes the backlog.
    if (listen_fd_ >= 0) ::listen(listen_fd_, 1024);
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    return port;
  }

  void Stop() {
    server_.stop();
    if (listener_.joinable()) listener_.join();
  }

 private:
  void Configure() {
    server_.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd_ = sock;
    });
    const size_t threads = static_cast<size_t>(c_.queue_size + c_.max_batch_size) + 8;
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_.set_payload_max_length(static_cast<size_t>(c_.max_body_bytes));
    server_.set_read_timeout(c_.timeout_s, 0);
    server_.set_write_timeout(c_.timeout_s, 0);
    server_.set_keep_alive_timeout(c_.timeout_s);
    server_.Put("/api", [this](const httplib::Request& req, httplib::Response& res) {
      Handle(Api::kMegatron, req, res);
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Handle(Api::kCompletions, req, res);
    });
    server_.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
      const nlohmann::json j = {{"queued", queue_.size()}, {"served", served_.load()}};
      res.set_content(j.dump(), "application/json");
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.Render(static_cast<int64_t>(queue_.size())),
                      "text/plain; version=0.0.4");
    });
    server_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(serve::ModelsJson(model_, started_), "application/json");
    });
    server_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string what = res.status == 413 ? "the request body is too large"
                               : res.status == 404
                                   ? absl::StrCat("no endpoint ", req.method, " ", req.path,
                                                  " (PUT /api, POST /v1/completions)")
                                   : absl::StrCat("HTTP ", res.status);
      res.set_content(
          ErrorJson(res.status < 500 ? absl::InvalidArgumentError(what) : absl::UnknownError(what)),
          "application/json");
    });
  }

  void Handle(Api api, const httplib::Request& req, httplib::Response& res) {
    const auto reply = [&res](const absl::Status& s) {
      res.status = HttpStatus(s);
      res.set_content(ErrorJson(s), "application/json");
    };
    const uint64_t seed = seed_.fetch_add(0x9E3779B97F4A7C15ull);
    absl::StatusOr<GenerationRequest> request =
        ParseRequest(api, req.body, tokenizer_, limits_, seed);
    if (!request.ok()) return reply(request.status());
    if (request->stream) return Stream(*std::move(request), res);
    std::optional<std::future<JobResult>> pending = queue_.TryPush(*request);
    if (!pending) return reply(Busy());
    const JobResult result = pending->get();
    if (!result.status.ok()) return reply(result.status);
    absl::StatusOr<std::string> body =
        ResponseJson(*request, result.generations, tokenizer_, model_, ++ids_,
                     static_cast<int64_t>(std::time(nullptr)));
    if (!body.ok()) return reply(body.status());
    res.set_content(*body, "application/json");
  }

  absl::Status Busy() const {
    return absl::UnavailableError(
        absl::StrCat("the server is busy (", queue_.capacity(), " requests queued); retry later"));
  }

  // What a streamed response's content provider keeps between its calls.
  struct StreamState {
    GenerationRequest request;
    std::unique_ptr<serve::CompletionStream> stream;
    std::mutex mu;
    std::condition_variable ready;         // A token came, or the answer.
    std::deque<serve::TokenEvent> tokens;  // Guarded by mu (the generation thread pushes).
    bool answered = false;                 // Guarded by mu.
    std::future<JobResult> result;
    std::shared_ptr<std::atomic<bool>> cancelled;
    bool finished = false;
  };

  // "stream": true: queue the job, then send each token as it comes (serve/serve_stream.h).
  void Stream(GenerationRequest request, httplib::Response& res) {
    auto st = std::make_shared<StreamState>();
    st->request = std::move(request);
    st->stream = std::make_unique<serve::CompletionStream>(
        st->request, tokenizer_, model_, ++ids_, static_cast<int64_t>(std::time(nullptr)));
    auto job = std::make_unique<serve::Job>();
    job->request = st->request;
    job->on_token = [st](const serve::TokenEvent& t) {
      std::lock_guard<std::mutex> lock(st->mu);
      st->tokens.push_back(t);
      st->ready.notify_one();
    };
    job->on_answer = [st] {
      std::lock_guard<std::mutex> lock(st->mu);
      st->answered = true;
      st->ready.notify_one();
    };
    st->cancelled = job->cancelled;
    std::optional<std::future<JobResult>> pending = queue_.TryPush(std::move(job));
    if (!pending) {
      res.status = 503;
      return res.set_content(ErrorJson(Busy()), "application/json");
    }
    st->result = std::move(*pending);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) { return SendEvents(*st, sink); },
        [st](bool) {
          if (!st->finished) st->cancelled->store(true);  // The client went away first.
        });
  }

  // Sends what has come since the last call (waiting up to 100 ms for something); false when the
  // client cannot be written to.
  static bool SendEvents(StreamState& st, httplib::DataSink& sink) {
    std::deque<serve::TokenEvent> tokens;
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(st.mu);
      st.ready.wait_for(lock, std::chrono::milliseconds(100),
                        [&] { return !st.tokens.empty() || st.answered; });
      tokens.swap(st.tokens);
      done = st.answered;
    }
    // Answered without a call (the queue closed at shutdown).
    done = done || st.result.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    for (const serve::TokenEvent& t : tokens) {
      const absl::StatusOr<std::string> event = st.stream->Token(t);
      if (!event.ok() || !sink.write(event->data(), event->size())) return false;
    }
    if (!done) return true;
    const JobResult result = st.result.get();
    absl::StatusOr<std::string> last = serve::CompletionStream::Error(result.status);
    if (result.status.ok()) last = st.stream->Finish(result.generations);
    if (!last.ok()) last = serve::CompletionStream::Error(last.status());
    st.finished = true;
    if (!sink.write(last->data(), last->size())) return false;
    sink.done();
    return true;
  }

  const ServeConfig& c_;
  const data::Tokenizer& tokenizer_;
  JobQueue& queue_;
  const ServeLimits limits_;
  const std::string model_;
  const std::atomic<int64_t>& served_;
  const serve::ServeMetrics& metrics_;
  const int64_t started_ = static_cast<int64_t>(std::time(nullptr));
  std::atomic<uint64_t> seed_;
  std::atomic<int64_t> ids_{0};
  socket_t listen_fd_ = -1;
  httplib::Server server_;
  std::thread listener_;
};

absl::Status Serve(const ServeConfig& c, comm::Communicator& world, int local_rank, int local_size,
                   const std::atomic<bool>& stop_requested) {
  std::signal(SIGPIPE, SIG_IGN);  // A vanished client is an error on its socket, not a signal.
  ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tokenizer, data::CreateTokenizer("gpt2"));
  ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> s,
                   LoadForInference(c.inference, world, local_rank, local_size));
  s->rank.exec.row_invariant_gemm = c.batch_invariant;
  const models::ModelConfig& mc = s->model->config();
  if (mc.vocab_size != tokenizer->vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat("the checkpoint's vocabulary has ",
                                                      mc.vocab_size,
                                                      " tokens, the GPT-2 "
                                                      "tokenizer ",
                                                      tokenizer->vocab_size()));
  }
  ServeLimits limits;
  limits.max_prompts = c.max_prompts;
  limits.max_tokens_per_request = c.max_tokens_per_request;
  limits.max_positions = mc.max_position_embeddings;
  std::atomic<int64_t> served{0};
  serve::ServeMetrics metrics;
  std::unique_ptr<JobQueue> queue;
  std::unique_ptr<FrontEnd> front;
  if (world.rank() == 0) {
    queue = std::make_unique<JobQueue>(c.queue_size);
    if (!c.hold_file.empty()) {
      queue->set_held([f = c.hold_file] { return serve::HoldFileExists(f); });
    }
    const std::string model = std::filesystem::path(c.inference.load).filename().string();
    front = std::make_unique<FrontEnd>(c, *tokenizer, *queue, limits, model, served, metrics);
    ASSIGN_OR_RETURN(const int port, front->Start());
    std::printf("serving %s (iteration %lld, %s, tensor parallel %d) at http://%s:%d\n",
                c.inference.load.c_str(), static_cast<long long>(s->iteration),
                mc.ArchitectureName().c_str(), world.size(), c.host.c_str(), port);
    std::fflush(stdout);
  }
  ServeLoopOptions options;
  options.hold_file = c.hold_file;
  options.batch.max_batch_size = c.max_batch_size;
  options.batch.max_batched_tokens = c.max_batched_tokens;
  options.metrics = world.rank() == 0 ? &metrics : nullptr;
  const absl::Status loop =
      RunServeLoop(world, *s, *tokenizer, queue.get(), options, stop_requested, &served);
  if (queue != nullptr) queue->Close(absl::UnavailableError("the server is shutting down"));
  if (front != nullptr) front->Stop();
  RETURN_IF_ERROR(loop);
  if (world.rank() == 0) {
    std::printf("stopped after %lld requests\n", static_cast<long long>(served.load()));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace jobs
}  // namespace mt

int main(int argc, char** argv) {
  mt::jobs::ServeConfig config;
  const mt::ConfigFlags<mt::jobs::ServeConfig> flags(config);
  mt::comm::MpiMainOptions options;
  options.stop_signals = {SIGTERM, SIGINT};
  return mt::comm::MpiMain(
      argc, argv, {"serve", "HTTP text generation server for a trained GPT checkpoint."},
      [&](int) { return flags.ApplyGivenAndValidate(&config); },
      [&](const mt::comm::MpiProcess& p) -> absl::StatusOr<int> {
        RETURN_IF_ERROR(mt::jobs::Serve(config, p.world, p.local_rank, p.local_size, *p.stop));
        return 0;
      },
      options);
}
