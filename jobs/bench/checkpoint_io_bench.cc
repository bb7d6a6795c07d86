// checkpoint_io_bench: how fast a training checkpoint is saved and loaded, against the disk's own
// sequential rates measured in the same run (docs/perf/checkpoint.md records its output).
//
// One process (no mpirun needed) builds a registered GPT-family model (--model) on the CPU with an
// Adam optimizer, then, for each of --rounds rounds, in --dir:
//   1. dd if=/dev/zero of=DIR/ddtest bs=8M count=N conv=fsync, N x 8 MiB >= the checkpoint's size:
//      the disk's sequential write rate, fsync included;
//   2. caches dropped (echo 3 > /proc/sys/vm/drop_caches, needs root), dd if=DIR/ddtest
//      of=/dev/null bs=8M: its sequential read rate from the device;
//   3. train::SaveTrainingState (the training job's save: shard files, fsyncs, commit), timed, into
//      an emptied DIR/checkpoint, after dropping the caches;
//   4. caches dropped, train::LoadTrainingState (the job's resume, each tensor checked against the
//      digest --checkpoint_verify names: its CRC32C by default), timed, and the loaded state
//      compared with the saved one;
//   5. caches dropped, the same save (before step 3) and load through a file system without direct
//      reads and writes (the page cache's path, as they were before they went around it), for a
//      same-run comparison;
//   6. caches dropped, the shard's tensors file read by the same reader without checking digests
//      (what reading alone costs).
// Step 2 also times dd iflag=direct (the device without the page cache). Saves and loads print
// the CPU seconds of the process's threads beside their wall time.
// Before the rounds it prints the SHA-256 rate of one thread and of the workers the checkpoint
// code hashes on (checkpoint/digest_workers.h), and the CRC32C rate of one thread with the table,
// the crc32 instruction on one stream, and on three (core/crc32c.h).
// Each round prints the rates and the ratios save / dd write and load / dd read; the end, the
// minimum and median of each ratio. Everything written under --dir is removed at the end.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/digest_workers.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/sha256.h"
#include "comm/mpi_main.h"
#include "comm/parallel_context.h"
#include "core/crc32c.h"
#include "core/fields.h"
#include "core/file_system.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "core/tensor.h"
#include "gflags/gflags.h"
#include "models/model.h"
#include "models/registry.h"
#include "nn/parameter.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/training_state.h"

DEFINE_string(model, "gpt2-124m", "A registered GPT-family model whose training state is saved.");
DEFINE_string(dir, "/tmp/checkpoint_io_bench",
              "A directory on the disk to measure; created, and what the benchmark writes in it is "
              "removed at the end.");
DEFINE_int32(rounds, 3, "Rounds of (dd write, dd read, save, load).");
DEFINE_string(checkpoint_verify, "crc32c",
              "What the timed loads check each tensor against: crc32c, sha256 or none (as the "
              "training job's --checkpoint_verify).");
DEFINE_bool(drop_caches, true,
            "Drop the page cache before each read and each save (needs root; without it the reads "
            "may come from memory, which the output then says).");

namespace mt {
namespace jobs {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// CPU seconds (user + system) of this process's threads so far.
double CpuSeconds() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// The machine's file system without direct reads and writes: the save and load as they were before
// they came, for the same-run comparison.
class BufferedFileSystem : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p) override {
    return base_.NewWritableFile(p);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& p) override {
    return base_.NewRandomAccessFile(p);
  }
  absl::StatusOr<std::string> ReadFile(const std::string& p) override { return base_.ReadFile(p); }
  absl::StatusOr<int64_t> FileSize(const std::string& p) override { return base_.FileSize(p); }
  bool PathExists(const std::string& p) override { return base_.PathExists(p); }
  bool IsDirectory(const std::string& p) override { return base_.IsDirectory(p); }
  absl::Status CheckWritableDirectory(const std::string& p) override {
    return base_.CheckWritableDirectory(p);
  }
  absl::Status SyncDirectory(const std::string& p) override { return base_.SyncDirectory(p); }
  absl::Status CreateDirectories(const std::string& p) override {
    return base_.CreateDirectories(p);
  }
  absl::Status Rename(const std::string& a, const std::string& b) override {
    return base_.Rename(a, b);
  }
  absl::Status Exchange(const std::string& a, const std::string& b) override {
    return base_.Exchange(a, b);
  }
  absl::Status RemoveAll(const std::string& p) override { return base_.RemoveAll(p); }
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& p) override {
    return base_.ListDirectory(p);
  }

 private:
  FileSystem& base_ = DefaultFileSystem();
};

// sync, then echo 3 > /proc/sys/vm/drop_caches. sync(2) rather than a `sync` process: a fork
// would leave this process's pages write-protected, and the next timed load would pay a page
// fault for every 4 KiB it writes.
absl::Status DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.flush();
  if (!f) return absl::PermissionDeniedError("cannot write /proc/sys/vm/drop_caches (not root?)");
  return absl::OkStatus();
}

// Seconds `argv` takes to run.
absl::StatusOr<double> TimeCommand(const std::vector<std::string>& argv) {
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(RunCommand(argv, "", Stderr::kDiscard).status());
  return Seconds(start);
}

// The bytes of every regular file under `dir`.
int64_t BytesUnder(const std::string& dir) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

// A fingerprint of the f32 state: every word of the three flat tensors, mixed by position.
uint64_t Fingerprint(const std::vector<TensorView>& views) {
  uint64_t h = 0;
  for (const TensorView& v : views) {
    const uint32_t* w = static_cast<const uint32_t*>(v.data);
    const int64_t n = v.numel();
    for (int64_t i = 0; i < n; ++i) h = h * 0x100000001b3ULL + w[i];
  }
  return h;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A registered model's training state on the CPU, with moments that are not all zero.
struct BenchState {
  models::ModelConfig config;
  std::unique_ptr<comm::ParallelContext> parallel;
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<train::Optimizer> optimizer;
  train::LossScaler scaler{{}};
  train::LrSchedule schedule{{}};
  train::TrainingCounters counters;
  std::vector<TensorView> state;  // The values and the two moments.
  uint64_t fingerprint = 0;       // Of `state` as saved.

  absl::Status Save(const std::string& ckpt, FileSystem& fs = DefaultFileSystem()) {
    return train::SaveTrainingState(ckpt, 1, *parallel, config, *store, *optimizer, scaler,
                                    schedule, counters, FLAGS_model, fs);
  }
  absl::Status Load(const std::string& ckpt, FileSystem& fs = DefaultFileSystem()) {
    return train::LoadTrainingState(ckpt, *parallel, config, store.get(), optimizer.get(), &scaler,
                                    &schedule, &counters, fs, verify);
  }
  checkpoint::CheckpointVerify verify = checkpoint::CheckpointVerify::kCrc32c;
};

absl::StatusOr<std::unique_ptr<BenchState>> MakeState(comm::Communicator& world) {
  auto b = std::make_unique<BenchState>();
  ASSIGN_OR_RETURN(const models::RegisteredModel registered, models::FindModel(FLAGS_model));
  b->config = registered.config;
  ASSIGN_OR_RETURN(b->parallel,
                   comm::ParallelContext::Create(world, {}, b->config.num_attention_heads));
  b->store = std::make_unique<nn::ParameterStore>(0, 1, DType::kF32, Device::Cpu());
  ASSIGN_OR_RETURN(b->model, models::CreateModel(b->config, b->store.get(), {}));
  RETURN_IF_ERROR(b->store->Allocate(1234));
  ASSIGN_OR_RETURN(train::Optimizer optimizer,
                   train::Optimizer::Create(b->store.get(), {}, &b->parallel->dp()));
  b->optimizer = std::make_unique<train::Optimizer>(std::move(optimizer));
  // Moments that are not all zero: m = v / 2, v2 = v * v.
  const TensorView values = b->store->flat_values();
  const float* v = values.data_as<float>();
  float* m = b->optimizer->exp_avg().data_as<float>();
  float* m2 = b->optimizer->exp_avg_sq().data_as<float>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    m[i] = 0.5f * v[i];
    m2[i] = v[i] * v[i];
  }
  b->state = {values, b->optimizer->exp_avg(), b->optimizer->exp_avg_sq()};
  b->fingerprint = Fingerprint(b->state);
  b->counters.iteration = 100;
  return b;
}

// Prints the SHA-256 rate of one thread over 256 MiB of the values, and of the workers the
// checkpoint code starts over all three tensors: what hashing costs on this machine.
void PrintHashRates(const std::vector<TensorView>& state) {
  const TensorView& values = state[0];
  const size_t hash_bytes = std::min<size_t>(size_t{256} << 20, values.nbytes());
  Clock::time_point start = Clock::now();
  const std::string digest = checkpoint::Sha256Hex(values.data, hash_bytes);
  const double sha_rate = hash_bytes / Seconds(start) / 1e6;
  const int workers = checkpoint::DigestWorkers::DefaultThreads();
  start = Clock::now();
  {
    std::vector<checkpoint::DigestWorkers::Buffer> buffers;
    for (const TensorView& v : state) {
      for (size_t at = 0; at < v.nbytes(); at += hash_bytes) {
        buffers.push_back({static_cast<char*>(v.data) + at, std::min(hash_bytes, v.nbytes() - at)});
      }
    }
    checkpoint::DigestWorkers hashing(buffers, workers);
    hashing.MarkAllReady();
    hashing.Finish();
  }
  const double sha_workers_rate = 3.0 * values.nbytes() / Seconds(start) / 1e6;
  std::printf("sha256: one thread %.0f MB/s (%s...), %d workers %.0f MB/s\n", sha_rate,
              digest.substr(0, 8).c_str(), workers, sha_workers_rate);
}

// Prints the CRC32C rate of one thread: the table, the crc32 instruction on one stream and on
// three (core/crc32c.h), over `n` bytes of the values (from memory) and over one 256 KiB piece of
// them hashed over and over (from the cache, as the digest workers hash a piece the SHA-256 has
// just read).
void PrintCrcRates(const TensorView& values, size_t n) {
  using Crc = uint32_t (*)(uint32_t, const void*, size_t);
  const auto rate = [&](Crc crc, size_t bytes, size_t piece, uint32_t* value) {
    const Clock::time_point at = Clock::now();
    for (size_t done = 0; done < bytes; done += piece) *value = crc(*value, values.data, piece);
    return bytes / Seconds(at) / 1e6;
  };
  const size_t piece = size_t{256} << 10;
  uint32_t table = 0, one = 0, three = 0, cached_one = 0, cached_three = 0;
  // The table is slow: 64 MiB of it.
  const double table_rate = rate(crc32c_internal::Portable, std::min(n, size_t{64} << 20),
                                 std::min(n, size_t{64} << 20), &table);
  const double one_rate = rate(crc32c_internal::Sse42, n, n, &one);
  const double three_rate = rate(crc32c_internal::Sse42ThreeWay, n, n, &three);
  const double cached_one_rate = rate(crc32c_internal::Sse42, n, piece, &cached_one);
  const double cached_three_rate = rate(crc32c_internal::Sse42ThreeWay, n, piece, &cached_three);
  std::printf(
      "crc32c: one thread, table %.0f MB/s; crc32 instruction from memory: one stream %.0f MB/s, "
      "three %.0f MB/s (%.2fx); from the cache: one stream %.0f MB/s, three %.0f MB/s (%.2fx)%s\n",
      table_rate, one_rate, three_rate, three_rate / one_rate, cached_one_rate, cached_three_rate,
      cached_three_rate / cached_one_rate,
      crc32c_internal::CpuHasSse42() ? "" : " [no SSE4.2: all are the table]");
  if (one != three || cached_one != cached_three) {
    std::printf("error: the CRC32C paths disagree\n");
  }
}

// The rates of every round (MB/s) and the ratios save / dd write and load / dd read.
struct Rates {
  std::vector<double> save_ratio, buffered_save_ratio, load_ratio, buffered_ratio, save,
      buffered_save, load, buffered, dd_write, dd_read, dd_direct, read_only;
};

// Wall and CPU seconds of one timed step, the caches dropped before it.
struct Timed {
  double wall = 0, cpu = 0;
};
absl::StatusOr<Timed> TimeIt(const std::function<void()>& drop,
                             const std::function<absl::Status()>& step) {
  drop();
  const double cpu = CpuSeconds();
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(step());
  return Timed{Seconds(start), CpuSeconds() - cpu};
}

// Loads the checkpoint over scribbled state through `fs` and checks what it restored.
absl::StatusOr<Timed> TimedLoad(BenchState& b, const std::string& ckpt, FileSystem& fs,
                                const std::function<void()>& drop) {
  for (const TensorView& v : b.state) std::memset(v.data, 0xff, v.nbytes());
  ASSIGN_OR_RETURN(const Timed t, TimeIt(drop, [&] { return b.Load(ckpt, fs); }));
  if (Fingerprint(b.state) != b.fingerprint) {
    return absl::InternalError("the loaded state differs from the saved one");
  }
  return t;
}

// The shard's tensors file read by the same reader without checking digests: what reading alone
// costs (into memory written since the last fork, as the load's is).
absl::StatusOr<Timed> TimedReadOnly(BenchState& b, const std::string& ckpt, Tensor& scratch,
                                    const std::function<void()>& drop,
                                    checkpoint::SafetensorsReader::ReadStats* stats) {
  std::memset(scratch.data(), 0, scratch.nbytes());
  ASSIGN_OR_RETURN(
      const checkpoint::SafetensorsReader reader,
      checkpoint::SafetensorsReader::Open(checkpoint::ShardDir(ckpt, b.counters.iteration, 0) +
                                          "/" + checkpoint::kShardTensorsFile));
  std::vector<checkpoint::SafetensorsReader::ReadRequest> reads;
  for (const checkpoint::SafetensorsEntry& e : reader.entries()) {
    reads.push_back(
        {e.name, TensorView(static_cast<char*>(scratch.data()) + e.begin, e.shape, e.dtype)});
  }
  ASSIGN_OR_RETURN(const Timed t, TimeIt(drop, [&] { return reader.ReadMany(reads, stats); }));
  return t;
}

// One round (the file comment's steps 1-6); appends to *rates. `bytes`: the checkpoint's size.
absl::Status RunRound(int round, BenchState& b, const std::string& dir, int64_t bytes,
                      Tensor& scratch, const std::function<void()>& drop, Rates* rates) {
  const std::string ckpt = dir + "/checkpoint";
  const std::string ddfile = dir + "/ddtest";
  const int64_t mib8 = int64_t{8} << 20;
  const int64_t count = (bytes + mib8 - 1) / mib8;
  const double dd_bytes = static_cast<double>(count * mib8);
  std::filesystem::remove(ddfile);
  drop();
  ASSIGN_OR_RETURN(const double dd_write,
                   TimeCommand({"dd", "if=/dev/zero", "of=" + ddfile, "bs=8M",
                                absl::StrCat("count=", count), "conv=fsync"}));
  drop();
  ASSIGN_OR_RETURN(const double dd_read,
                   TimeCommand({"dd", "if=" + ddfile, "of=/dev/null", "bs=8M"}));
  drop();
  ASSIGN_OR_RETURN(const double dd_direct,
                   TimeCommand({"dd", "if=" + ddfile, "of=/dev/null", "bs=8M", "iflag=direct"}));
  std::filesystem::remove(ddfile);

  BufferedFileSystem buffered_fs;
  std::filesystem::remove_all(ckpt);
  ASSIGN_OR_RETURN(const Timed buffered_save,
                   TimeIt(drop, [&] { return b.Save(ckpt, buffered_fs); }));
  std::filesystem::remove_all(ckpt);
  ASSIGN_OR_RETURN(const Timed save, TimeIt(drop, [&] { return b.Save(ckpt); }));
  ASSIGN_OR_RETURN(const Timed load, TimedLoad(b, ckpt, DefaultFileSystem(), drop));
  ASSIGN_OR_RETURN(const Timed buffered, TimedLoad(b, ckpt, buffered_fs, drop));
  checkpoint::SafetensorsReader::ReadStats read_stats;
  ASSIGN_OR_RETURN(const Timed read_only, TimedReadOnly(b, ckpt, scratch, drop, &read_stats));

  Rates& r = *rates;
  r.dd_write.push_back(dd_bytes / dd_write / 1e6);
  r.dd_read.push_back(dd_bytes / dd_read / 1e6);
  r.dd_direct.push_back(dd_bytes / dd_direct / 1e6);
  r.save.push_back(bytes / save.wall / 1e6);
  r.buffered_save.push_back(bytes / buffered_save.wall / 1e6);
  r.buffered_save_ratio.push_back(r.buffered_save.back() / r.dd_write.back());
  r.load.push_back(bytes / load.wall / 1e6);
  r.buffered.push_back(bytes / buffered.wall / 1e6);
  r.read_only.push_back(bytes / read_only.wall / 1e6);
  r.save_ratio.push_back(r.save.back() / r.dd_write.back());
  r.load_ratio.push_back(r.load.back() / r.dd_read.back());
  r.buffered_ratio.push_back(r.buffered.back() / r.dd_read.back());
  std::printf(
      "round %d: dd write %.0f MB/s, save %.0f MB/s (%.2f s, cpu %.2f s): %.1f%%, buffered save "
      "%.0f MB/s (%.2f s, cpu %.2f s): %.1f%% | dd read %.0f "
      "MB/s, O_DIRECT %.0f MB/s | load %.0f MB/s (%.2f s, cpu %.2f s): %.1f%% | buffered load "
      "%.0f MB/s (%.2f s, cpu %.2f s): %.1f%% | read without digests %.0f MB/s (cpu %.2f s, %.0f "
      "MB direct, %.0f MB of it in place)\n",
      round, r.dd_write.back(), r.save.back(), save.wall, save.cpu, 100 * r.save_ratio.back(),
      r.buffered_save.back(), buffered_save.wall, buffered_save.cpu,
      100 * r.buffered_save_ratio.back(), r.dd_read.back(), r.dd_direct.back(), r.load.back(),
      load.wall, load.cpu, 100 * r.load_ratio.back(), r.buffered.back(), buffered.wall,
      buffered.cpu, 100 * r.buffered_ratio.back(), r.read_only.back(), read_only.cpu,
      read_stats.direct_bytes / 1e6, read_stats.in_place_bytes / 1e6);
  std::fflush(stdout);
  return absl::OkStatus();
}

void PrintSummary(const Rates& r) {
  auto summary = [](const char* what, const std::vector<double>& v, double scale,
                    const char* unit) {
    std::printf("%s: min %.1f%s, median %.1f%s\n", what,
                scale * *std::min_element(v.begin(), v.end()), unit, scale * Median(v), unit);
  };
  summary("dd write", r.dd_write, 1, " MB/s");
  summary("save", r.save, 1, " MB/s");
  summary("save / dd write", r.save_ratio, 100, "%");
  summary("buffered save", r.buffered_save, 1, " MB/s");
  summary("buffered save / dd write", r.buffered_save_ratio, 100, "%");
  summary("dd read", r.dd_read, 1, " MB/s");
  summary("load", r.load, 1, " MB/s");
  summary("load / dd read", r.load_ratio, 100, "%");
  summary("dd read O_DIRECT", r.dd_direct, 1, " MB/s");
  summary("buffered load", r.buffered, 1, " MB/s");
  summary("buffered load / dd read", r.buffered_ratio, 100, "%");
  summary("read without digests", r.read_only, 1, " MB/s");
}

absl::Status Run(const comm::MpiProcess& process) {
  if (process.world.size() != 1) {
    return absl::InvalidArgumentError("checkpoint_io_bench runs as one process");
  }
  if (FLAGS_rounds < 1) return absl::InvalidArgumentError("--rounds must be >= 1");
  ASSIGN_OR_RETURN(
      const checkpoint::CheckpointVerify verify,
      ParseEnum<checkpoint::CheckpointVerify>("checkpoint_verify", FLAGS_checkpoint_verify,
                                              checkpoint::kCheckpointVerifyNames));
  ASSIGN_OR_RETURN(std::unique_ptr<BenchState> b, MakeState(process.world));
  b->verify = verify;
  // Where the reads without digests go: memory of the state's size, touched once beforehand.
  Tensor scratch = Tensor::Zeros({3 * b->state[0].numel()}, DType::kF32);
  const std::string dir = FLAGS_dir;
  const std::string ckpt = dir + "/checkpoint";
  std::filesystem::create_directories(dir);
  bool dropped = true;
  auto drop = [&]() {
    if (!FLAGS_drop_caches) return;
    const absl::Status s = DropCaches();
    if (!s.ok() && dropped) std::printf("warning: %s\n", std::string(s.message()).c_str());
    dropped = dropped && s.ok();
  };
  // The checkpoint's exact size first (so that dd writes as much), untimed.
  RETURN_IF_ERROR(b->Save(ckpt));
  const int64_t bytes = BytesUnder(ckpt);
  std::printf(
      "checkpoint_io_bench: %s, %lld parameters; checkpoint of %.1f MB (f32 values and two Adam "
      "moments, one shard) in %s\n",
      FLAGS_model.c_str(), static_cast<long long>(b->state[0].numel()), bytes / 1e6, dir.c_str());
  PrintHashRates(b->state);
  PrintCrcRates(b->state[0], std::min<size_t>(size_t{256} << 20, b->state[0].nbytes()));
  std::printf("loads check each tensor's %s (--checkpoint_verify)\n",
              FLAGS_checkpoint_verify.c_str());
  Rates rates;
  for (int round = 1; round <= FLAGS_rounds; ++round) {
    RETURN_IF_ERROR(RunRound(round, *b, dir, bytes, scratch, drop, &rates));
  }
  std::filesystem::remove_all(ckpt);
  PrintSummary(rates);
  if (!dropped) std::printf("warning: caches were not dropped; reads may have been from memory\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace jobs
}  // namespace mt

int main(int argc, char** argv) {
  return mt::comm::MpiMain(
      argc, argv,
      {"checkpoint_io_bench",
       "Training checkpoint save and load, timed against dd's sequential rates."},
      [](int) { return absl::OkStatus(); },
      [](const mt::comm::MpiProcess& p) -> absl::StatusOr<int> {
        RETURN_IF_ERROR(mt::jobs::Run(p));
        return 0;
      });
}
