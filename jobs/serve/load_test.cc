// A load generator for the generation server (docs/perf/serving.md): starts //jobs/serve:serve on
// loopback once per --batch_sizes entry (the same binary and checkpoint, --max_batch_size set to
// it), sends it --clients concurrent clients in turn (each --requests streamed greedy completions
// of --max_tokens tokens, one after the other), and prints for each: generated tokens per second
// (all clients' tokens over the wall time), time to first token and the latency between tokens
// (percentiles over every request / token gap), and any non-200 answers; the best of --repeats
// runs, the servers' runs interleaved; then the throughput ratio of each batch size to the first
// at each client count, measured in this run.
//
//   bazel run -c opt //jobs/serve:load_test -- --load=CKPT --serve=$PWD/bazel-bin/jobs/serve/serve
//
// Bounded: every server start waits at most 120 s, every (server, clients) run at most
// --max_seconds (the clients then stop after their current request), and the servers are
// stopped with SIGTERM. Nothing leaves 127.0.0.1.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/config_flags.h"
#include "core/status.h"
#include "core/tool_main.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace jobs {
namespace {

using Clock = std::chrono::steady_clock;

struct LoadConfig {
  std::string load;   // Checkpoint directory.
  std::string serve;  // The serve binary.
  std::string clients = "1,4,16,64";
  std::string batch_sizes = "1,16";
  int requests = 2;
  int max_tokens = 48;
  int threads = 0;
  int repeats = 2;
  double max_seconds = 300;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("load", &self.load, "Checkpoint the server loads.");
    v("serve", &self.serve, "Path of the serve binary (bazel-bin/jobs/serve/serve).");
    v("clients", &self.clients, "Concurrent client counts, comma-separated.");
    v("batch_sizes", &self.batch_sizes, "The server's --max_batch_size values, comma-separated.");
    v("requests", &self.requests, "Requests each client sends, one after the other.");
    v("max_tokens", &self.max_tokens, "Tokens each request generates (greedy, streamed).");
    v("threads", &self.threads, "The server's --threads (0: its default).");
    v("repeats", &self.repeats, "Runs of each (server, clients) pair; the fastest is reported.");
    v("max_seconds", &self.max_seconds, "Bound on each (server, clients) run.");
  }
};

absl::StatusOr<std::vector<int>> Ints(const std::string& list, const char* flag) {
  std::vector<int> out;
  for (absl::string_view s : absl::StrSplit(list, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", s, "' is not >= 1"));
    }
    out.push_back(v);
  }
  return out;
}

// A server process on loopback.
class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(const LoadConfig& c, int batch, int queue) {
    int out[2];
    if (pipe(out) != 0) return absl::InternalError("pipe failed");
    const std::vector<std::string> args = {c.serve,
                                           "--load=" + c.load,
                                           "--port=0",
                                           absl::StrCat("--max_batch_size=", batch),
                                           absl::StrCat("--queue_size=", queue),
                                           absl::StrCat("--threads=", c.threads),
                                           "--timeout_s=60"};
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    auto s = std::unique_ptr<Server>(new Server(pid));
    // "serving ... at http://127.0.0.1:PORT" (read byte by byte: the pipe stays open).
    std::string line;
    for (char ch = 0; !(ch == '\n' && line.find("at http://") != std::string::npos);) {
      if (ch == '\n') line.clear();
      if (read(out[0], &ch, 1) != 1) {
        close(out[0]);
        return absl::FailedPreconditionError(
            absl::StrCat(c.serve, " exited before serving (see its error above)"));
      }
      line += ch;
    }
    s->out_ = out[0];
    s->port_ = std::stoi(line.substr(line.rfind(':') + 1));
    return s;
  }
  ~Server() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    if (out_ >= 0) close(out_);
  }
  int port() const { return port_; }

 private:
  explicit Server(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  int out_ = -1, port_ = 0;
};

struct Sample {
  std::vector<double> first_token, gaps;  // Seconds.
  int64_t tokens = 0, requests = 0, refused = 0;
};

// One streamed request; its measurements into *s.
void Request(int port, const std::string& body, Sample* s) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  std::string buffer;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      if (buffer.compare(0, 6, "data: ") != 0 || buffer.compare(6, 6, "[DONE]") == 0) continue;
      const auto j = nlohmann::json::parse(buffer.substr(6, end - 6), nullptr, false);
      if (j.is_discarded() || !j.contains("choices") ||
          !j["choices"][0]["finish_reason"].is_null()) {
        continue;
      }
      const Clock::time_point now = Clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      (s->tokens == 0 ? s->first_token : s->gaps).push_back(dt);
      ++s->tokens;
      last = now;
    }
    return true;
  };
  const httplib::Result r = cli.send(req);
  ++s->requests;
  if (!r || r->status != 200) ++s->refused;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

struct Row {
  int batch = 0, clients = 0;
  double tokens_per_s = 0;
  Sample all;
};

Row Drive(const LoadConfig& c, int port, int batch, int clients) {
  std::vector<Sample> samples(clients);
  std::atomic<bool> late{false};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < c.requests && !late.load(); ++r) {
        const nlohmann::json body = {{"prompt", absl::StrCat("Client ", i, " asks question ", r)},
                                     {"max_tokens", c.max_tokens},
                                     {"temperature", 0},
                                     {"stream", true}};
        // Per-request Sample: each client writes its own; merged below.
        Sample one;
        Request(port, body.dump(), &one);
        Sample& mine = samples[i];
        mine.first_token.insert(mine.first_token.end(), one.first_token.begin(),
                                one.first_token.end());
        mine.gaps.insert(mine.gaps.end(), one.gaps.begin(), one.gaps.end());
        mine.tokens += one.tokens;
        mine.requests += one.requests;
        mine.refused += one.refused;
        if (std::chrono::duration<double>(Clock::now() - start).count() > c.max_seconds) {
          late.store(true);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  Row row{batch, clients, 0, {}};
  for (const Sample& s : samples) {
    row.all.first_token.insert(row.all.first_token.end(), s.first_token.begin(),
                               s.first_token.end());
    row.all.gaps.insert(row.all.gaps.end(), s.gaps.begin(), s.gaps.end());
    row.all.tokens += s.tokens;
    row.all.requests += s.requests;
    row.all.refused += s.refused;
  }
  row.tokens_per_s = row.all.tokens / wall;
  return row;
}

void Print(const Row& r) {
  const auto ms = [](double s) { return s * 1e3; };
  std::printf("| %d | %d | %lld | %lld | %.1f | %.1f | %.1f | %.2f | %.2f |\n", r.batch, r.clients,
              static_cast<long long>(r.all.requests), static_cast<long long>(r.all.refused),
              r.tokens_per_s, ms(Percentile(r.all.first_token, 0.5)),
              ms(Percentile(r.all.first_token, 0.99)), ms(Percentile(r.all.gaps, 0.5)),
              ms(Percentile(r.all.gaps, 0.99)));
  std::fflush(stdout);
}

absl::Status Run(const LoadConfig& c) {
  if (c.load.empty() || c.serve.empty()) {
    return absl::InvalidArgumentError("--load and --serve are required");
  }
  if (access(c.serve.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--serve=", c.serve, " is not an executable (build //jobs/serve:serve)"));
  }
  if (c.requests < 1 || c.max_tokens < 1 || c.repeats < 1 || !(c.max_seconds > 0)) {
    return absl::InvalidArgumentError(
        "--requests, --max_tokens, --repeats and --max_seconds must be > 0");
  }
  ASSIGN_OR_RETURN(const std::vector<int> clients, Ints(c.clients, "clients"));
  ASSIGN_OR_RETURN(const std::vector<int> batches, Ints(c.batch_sizes, "batch_sizes"));
  const int most = *std::max_element(clients.begin(), clients.end());
  std::printf("%d request(s) per client, %d tokens each (greedy, streamed)\n\n", c.requests,
              c.max_tokens);
  std::printf(
      "| max_batch_size | clients | requests | refused | tokens/s | TTFT p50 ms | TTFT p99 ms | "
      "token p50 ms | token p99 ms |\n|---|---|---|---|---|---|---|---|---|\n");
  // Every server at once (an idle one sleeps), driven in turn at each client count and repeat,
  // so that the configurations compared are measured minutes apart at most.
  std::vector<std::unique_ptr<Server>> servers;
  for (int batch : batches) {
    ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::Start(c, batch, most));
    servers.push_back(std::move(server));
  }
  std::vector<Row> rows;
  for (int n : clients) {
    std::vector<Row> best(batches.size());
    for (int r = 0; r < c.repeats; ++r) {
      for (size_t b = 0; b < batches.size(); ++b) {
        Row row = Drive(c, servers[b]->port(), batches[b], n);
        if (row.tokens_per_s > best[b].tokens_per_s) best[b] = std::move(row);
      }
    }
    for (Row& row : best) {
      Print(row);
      rows.push_back(std::move(row));
    }
  }
  std::printf("\n");
  // Each batch size's throughput over the first's, client count by client count.
  for (const Row& r : rows) {
    for (const Row& base : rows) {
      if (base.batch != batches[0] || base.clients != r.clients || r.batch == batches[0]) continue;
      std::printf("%d clients: max_batch_size %d gives %.2fx the tokens/s of max_batch_size %d\n",
                  r.clients, r.batch,
                  base.tokens_per_s > 0 ? r.tokens_per_s / base.tokens_per_s : 0, base.batch);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace jobs
}  // namespace mt

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  mt::jobs::LoadConfig config;
  const mt::ConfigFlags<mt::jobs::LoadConfig> flags(config);
  return mt::ToolMain("load_test", "Throughput and latency of the generation server under load.",
                      argc, argv, [&]() -> absl::Status {
                        RETURN_IF_ERROR(flags.ApplyGiven(&config));
                        return mt::jobs::Run(config);
                      });
}
