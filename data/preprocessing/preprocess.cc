#include "data/preprocessing/preprocess.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "core/status.h"
#include "data/indexed/file_util.h"
#include "data/indexed/indexed_dataset.h"
#include "data/preprocessing/sentence_splitter.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace data {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The tokens of one chunk, grouped into sequences and documents.
struct ChunkResult {
  absl::Status status;
  std::vector<int32_t> tokens;
  std::vector<int32_t> sequence_lengths;
  std::vector<int32_t> document_sequences;  // [records]: sequences of each record; 0 = empty.
  int64_t input_bytes = 0;
};

struct Job {
  int64_t index = 0;
  InputChunk chunk;
};

// What a worker needs to process a chunk (read-only, shared).
struct WorkerContext {
  const PreprocessConfig* config;
  const Tokenizer* tokenizer;
  const std::vector<std::string>* paths;
  int32_t eod;
};

// The document text of a record: the JSON value at json_key, or the text itself.
absl::StatusOr<absl::string_view> DocumentText(const WorkerContext& ctx, const InputChunk& chunk,
                                               const InputRecord& record, nlohmann::json* scratch) {
  const absl::string_view raw = chunk.text(record);
  if (ctx.config->input_format == InputFormat::kText) return raw;
  auto where = [&] { return absl::StrCat((*ctx.paths)[record.file], ":", record.line, ": "); };
  *scratch = nlohmann::json::parse(raw.begin(), raw.end(), /*cb=*/nullptr,
                                   /*allow_exceptions=*/false);
  if (scratch->is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), "not valid JSON"));
  }
  if (!scratch->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), "not a JSON object"));
  }
  const std::string& key = ctx.config->json_key;
  const auto it = scratch->find(key);
  if (it == scratch->end()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), "no key '", key, "'"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), "the value of '", key, "' is not a string"));
  }
  return absl::string_view(it->get_ref<const std::string&>());
}

void ProcessChunk(const WorkerContext& ctx, const InputChunk& chunk, ChunkResult* out) {
  out->input_bytes = chunk.input_bytes;
  out->tokens.reserve(chunk.data.size() / 3 + 16);
  out->document_sequences.reserve(chunk.records.size());
  nlohmann::json scratch;
  std::vector<absl::string_view> whole(1);
  for (const InputRecord& record : chunk.records) {
    absl::StatusOr<absl::string_view> text = DocumentText(ctx, chunk, record, &scratch);
    if (!text.ok()) {
      out->status = text.status();
      return;
    }
    std::vector<absl::string_view> split;
    const std::vector<absl::string_view>* sentences = &whole;
    if (ctx.config->split_sentences) {
      split = SplitSentences(*text);
      sentences = &split;
    } else {
      whole[0] = *text;
    }
    int32_t num_sequences = 0;
    for (absl::string_view sentence : *sentences) {
      const size_t before = out->tokens.size();
      ctx.tokenizer->EncodeAppend(sentence, &out->tokens);
      const size_t n = out->tokens.size() - before;
      if (n == 0) continue;  // Megatron drops sentences without tokens.
      out->sequence_lengths.push_back(static_cast<int32_t>(n));
      ++num_sequences;
    }
    if (num_sequences > 0 && ctx.config->append_eod) {
      out->tokens.push_back(ctx.eod);
      ++out->sequence_lengths.back();
    }
    out->document_sequences.push_back(num_sequences);
  }
}

// Worker threads and the queues between them and the calling thread.
class WorkerPool {
 public:
  WorkerPool(const WorkerContext& ctx, int num_workers) : ctx_(ctx) {
    threads_.reserve(num_workers);
    for (int i = 0; i < num_workers; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      jobs_.clear();
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void Submit(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    work_cv_.notify_one();
  }

  // The result of chunk `index` if it is ready.
  bool TryTake(int64_t index, ChunkResult* out) {
    std::lock_guard<std::mutex> lock(mu_);
    return TakeLocked(index, out);
  }

  // Waits for the result of chunk `index` (which must have been submitted).
  void Take(int64_t index, ChunkResult* out) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return results_.count(index) > 0; });
    TakeLocked(index, out);
  }

 private:
  bool TakeLocked(int64_t index, ChunkResult* out) {
    auto it = results_.find(index);
    if (it == results_.end()) return false;
    *out = std::move(it->second);
    results_.erase(it);
    return true;
  }

  void Loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (stop_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      ChunkResult result;
      ProcessChunk(ctx_, job.chunk, &result);
      {
        std::lock_guard<std::mutex> lock(mu_);
        results_.emplace(job.index, std::move(result));
      }
      done_cv_.notify_one();
    }
  }

  const WorkerContext ctx_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Job> jobs_;                    // Guarded by mu_.
  std::map<int64_t, ChunkResult> results_;  // Guarded by mu_.
  bool stop_ = false;                       // Guarded by mu_.
};

absl::Status WriteChunk(const ChunkResult& result, IndexedDatasetWriter* writer,
                        PreprocessStats* stats) {
  RETURN_IF_ERROR(result.status);
  size_t token = 0;
  size_t sequence = 0;
  for (int32_t num_sequences : result.document_sequences) {
    if (num_sequences == 0) {
      ++stats->empty_documents;
      continue;
    }
    for (int32_t s = 0; s < num_sequences; ++s, ++sequence) {
      const size_t n = static_cast<size_t>(result.sequence_lengths[sequence]);
      RETURN_IF_ERROR(
          writer->AddSequence(absl::Span<const int32_t>(result.tokens.data() + token, n)));
      token += n;
    }
    RETURN_IF_ERROR(writer->EndDocument());
    ++stats->documents;
  }
  stats->sequences += static_cast<int64_t>(sequence);
  stats->tokens += static_cast<int64_t>(token);
  stats->bytes_in += result.input_bytes;
  return absl::OkStatus();
}

absl::Status CreateParentDirectory(const std::string& prefix) {
  const std::filesystem::path parent = std::filesystem::path(prefix).parent_path();
  if (parent.empty()) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) return ErrnoStatus(ec.value(), "cannot create output directory", parent.string());
  return absl::OkStatus();
}

}  // namespace

absl::Status PreprocessConfig::Validate() const {
  if (inputs.empty()) return absl::InvalidArgumentError("no input files");
  for (const std::string& path : inputs) {
    if (path.empty()) return absl::InvalidArgumentError("an input path is empty");
  }
  if (output_prefix.empty()) {
    return absl::InvalidArgumentError("output_prefix is empty");
  }
  if (input_format == InputFormat::kJsonl && json_key.empty()) {
    return absl::InvalidArgumentError("json_key is empty");
  }
  if (workers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("workers must be >= 0, got ", workers));
  }
  if (chunk_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_bytes must be >= 1, got ", chunk_bytes));
  }
  if (max_chunks_in_flight < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_chunks_in_flight must be >= 0, got ", max_chunks_in_flight));
  }
  if (!(progress_interval_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress_interval_s must be >= 0, got ", progress_interval_s));
  }
  return absl::OkStatus();
}

absl::StatusOr<PreprocessStats> Preprocess(const PreprocessConfig& config,
                                           const Tokenizer& tokenizer,
                                           const ProgressCallback& progress) {
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(config.Validate());
  const int32_t eod = tokenizer.eod_id();
  if (config.append_eod && eod == kNoToken) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer '", tokenizer.name(),
        "' has no end-of-document token; drop append_eod (BERT data is split into sentences "
        "and needs no EOD)"));
  }
  int workers = config.workers;
  if (workers == 0) workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int64_t max_in_flight =
      config.max_chunks_in_flight > 0 ? config.max_chunks_in_flight : 2 * workers + 2;

  ASSIGN_OR_RETURN(std::unique_ptr<InputReader> reader,
                   InputReader::Open(config.inputs, config.input_format, config.document_separator,
                                     config.chunk_bytes));
  RETURN_IF_ERROR(CreateParentDirectory(config.output_prefix));
  ASSIGN_OR_RETURN(
      std::unique_ptr<IndexedDatasetWriter> writer,
      IndexedDatasetWriter::CreateForVocab(config.output_prefix, tokenizer.vocab_size()));

  PreprocessStats stats;
  stats.workers = workers;
  PreprocessProgress report;
  report.total_bytes = reader->total_bytes();
  Clock::time_point last_report = start;
  {
    const WorkerContext ctx{&config, &tokenizer, &reader->paths(), eod};
    WorkerPool pool(ctx, workers);  // Joined on every return path.
    int64_t next_read = 0;
    int64_t next_write = 0;
    bool end_of_input = false;
    ChunkResult result;
    for (;;) {
      // Write what is ready, then read while there is room, else wait for the next result.
      bool have = pool.TryTake(next_write, &result);
      if (!have && !end_of_input && next_read - next_write < max_in_flight) {
        Job job;
        job.index = next_read;
        ASSIGN_OR_RETURN(bool got, reader->Next(&job.chunk));
        if (got) {
          pool.Submit(std::move(job));
          ++next_read;
        } else {
          end_of_input = true;
        }
        continue;
      }
      if (!have) {
        if (next_write == next_read) break;  // Everything read has been written.
        pool.Take(next_write, &result);
      }
      RETURN_IF_ERROR(WriteChunk(result, writer.get(), &stats));
      result = ChunkResult();
      ++next_write;
      if (progress && SecondsSince(last_report) >= config.progress_interval_s) {
        last_report = Clock::now();
        report.documents = stats.documents;
        report.bytes_in = stats.bytes_in;
        report.seconds = SecondsSince(start);
        progress(report);
      }
    }
  }
  stats.bytes_in = reader->bytes_read();  // Also counts separators after the last document.
  RETURN_IF_ERROR(writer->Finalize());
  ASSIGN_OR_RETURN(int64_t bin_bytes, FileSize(BinPath(config.output_prefix)));
  ASSIGN_OR_RETURN(int64_t idx_bytes, FileSize(IndexPath(config.output_prefix)));
  stats.bytes_out = bin_bytes + idx_bytes;
  stats.seconds = SecondsSince(start);
  stats.peak_rss_bytes = PeakRssBytes();
  return stats;
}

int64_t PeakRssBytes() {
  struct rusage usage;
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes.
}

std::string FormatProgress(const PreprocessProgress& p) {
  const double mb = p.bytes_in / 1e6;
  const double rate = p.seconds > 0 ? mb / p.seconds : 0;
  std::string line = absl::StrFormat("%d documents, %.1f", p.documents, mb);
  if (p.total_bytes >= 0) {
    const double total = p.total_bytes / 1e6;
    const double pct = p.total_bytes > 0 ? 100.0 * p.bytes_in / p.total_bytes : 100.0;
    absl::StrAppendFormat(&line, " / %.1f MB (%.1f%%), %.1f MB/s", total, pct, rate);
    if (rate > 0) {
      const double eta = std::max(0.0, (total - mb) / rate);
      absl::StrAppendFormat(&line, ", ETA %.0f s", eta);
    }
  } else {
    absl::StrAppendFormat(&line, " MB, %.1f MB/s", rate);
  }
  return line;
}

}  // namespace data
}  // namespace mt
