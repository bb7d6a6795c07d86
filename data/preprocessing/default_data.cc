#include "data/preprocessing/default_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/indexed/file_util.h"
#include "data/indexed/indexed_dataset.h"
#include "data/tokenizers/assets.h"
#include "data/tokenizers/factory.h"

namespace mt {
namespace data {
namespace {

struct DatasetSpec {
  const char* name;
  const char* tokenizer;
  bool append_eod;
  bool split_sentences;
};

constexpr DatasetSpec kGpt2Spec = {kGpt2DefaultDataName, "gpt2", /*append_eod=*/true,
                                   /*split_sentences=*/false};
constexpr DatasetSpec kBertSpec = {kBertDefaultDataName, "bert", /*append_eod=*/false,
                                   /*split_sentences=*/true};
constexpr char kSeparator[] = "%";

std::string EnvOr(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? std::string(v) : fallback;
}

// The asset files a tokenizer is built from (assets.h).
absl::StatusOr<std::vector<std::string>> TokenizerAssets(absl::string_view tokenizer) {
  std::vector<std::string> out;
  if (tokenizer == "gpt2") {
    ASSIGN_OR_RETURN(std::string encoder, Gpt2EncoderJson());
    ASSIGN_OR_RETURN(std::string merges, Gpt2VocabBpe());
    ASSIGN_OR_RETURN(std::string classes, JsUnicodeClasses());
    out = {encoder, merges, classes};
  } else {
    ASSIGN_OR_RETURN(std::string vocab, BertVocabTxt());
    out = {vocab};
  }
  return out;
}

// "<kind> <path> <size> <mtime ns>\n".
absl::StatusOr<std::string> FileLine(absl::string_view kind, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  const int64_t mtime_ns =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return absl::StrCat(kind, " ", path, " ", static_cast<int64_t>(st.st_size), " ", mtime_ns, "\n");
}

// The part of a stamp that describes the inputs and settings.
absl::StatusOr<std::string> InputsDescription(const DatasetSpec& spec,
                                              const std::vector<std::string>& corpus, bool shuffle,
                                              uint64_t seed) {
  std::string out =
      absl::StrCat("megatron-cpp default data v", kDefaultDataVersion, "\n",
                   "settings tokenizer=", spec.tokenizer, " append_eod=", spec.append_eod,
                   " split_sentences=", spec.split_sentences, " separator=", kSeparator,
                   " shuffle=", shuffle, " seed=", seed, "\n");
  ASSIGN_OR_RETURN(std::vector<std::string> assets, TokenizerAssets(spec.tokenizer));
  for (const std::string& path : assets) {
    ASSIGN_OR_RETURN(std::string line, FileLine("asset", path));
    out += line;
  }
  for (const std::string& path : corpus) {
    ASSIGN_OR_RETURN(std::string line, FileLine("input", path));
    out += line;
  }
  return out;
}

// The part of a stamp that describes the outputs: "output <name> <size>\n" for .bin and .idx;
// NotFound if one is missing.
absl::StatusOr<std::string> OutputsDescription(const std::string& prefix) {
  std::string out;
  for (const std::string& path : {BinPath(prefix), IndexPath(prefix)}) {
    ASSIGN_OR_RETURN(int64_t size, FileSize(path));
    absl::StrAppend(&out, "output ", std::filesystem::path(path).filename().string(), " ", size,
                    "\n");
  }
  return out;
}

std::string StampPath(const std::string& prefix) { return prefix + ".stamp"; }

// Rewrites the dataset at `from` to `to` with its documents in a seeded random order (Fisher-Yates
// over std::mt19937_64 with modulo-free rejection), then removes `from`.
absl::Status ShuffleDocuments(const std::string& from, const std::string& to, uint64_t seed) {
  ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> in, IndexedDataset::Open(from));
  std::vector<int64_t> order(in->num_documents());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do {
      r = rng();
    } while (r >= limit);
    std::swap(order[i], order[static_cast<int64_t>(r % bound)]);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<IndexedDatasetWriter> out,
                   IndexedDatasetWriter::Create(to, in->dtype()));
  std::vector<int64_t> tokens;
  for (int64_t d : order) {
    for (int64_t s = in->document_index(d); s < in->document_index(d + 1); ++s) {
      tokens = in->sequence(s).ToVector();
      RETURN_IF_ERROR(out->AddSequence(tokens));
    }
    RETURN_IF_ERROR(out->EndDocument());
  }
  RETURN_IF_ERROR(out->Finalize());
  in.reset();
  std::error_code ec;
  std::filesystem::remove(BinPath(from), ec);
  std::filesystem::remove(IndexPath(from), ec);
  return absl::OkStatus();
}

bool UpToDate(const std::string& prefix, const std::string& inputs) {
  std::ifstream in(StampPath(prefix), std::ios::binary);
  if (!in) return false;
  const std::string stamp((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!absl::StartsWith(stamp, inputs)) return false;
  absl::StatusOr<std::string> outputs = OutputsDescription(prefix);
  return outputs.ok() && stamp.substr(inputs.size()) == *outputs;
}

absl::Status WriteStamp(const std::string& prefix, const std::string& inputs) {
  ASSIGN_OR_RETURN(std::string outputs, OutputsDescription(prefix));
  const std::string stamp = inputs + outputs;
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicOutputFile> file,
                   AtomicOutputFile::Create(StampPath(prefix)));
  RETURN_IF_ERROR(file->Append(stamp.data(), stamp.size()));
  return file->Commit();
}

// Builds one dataset unless it is up to date; returns whether it was built.
absl::StatusOr<bool> MakeOne(const DatasetSpec& spec, const std::vector<std::string>& corpus,
                             const DefaultDataConfig& config, const std::string& prefix,
                             const ProgressCallback& progress, PreprocessStats* stats) {
  ASSIGN_OR_RETURN(std::string inputs,
                   InputsDescription(spec, corpus, config.shuffle_documents, config.shuffle_seed));
  if (!config.force && UpToDate(prefix, inputs)) return false;
  // Remove the old stamp first: if the build fails or is interrupted, nothing claims the old (or
  // a mixed) dataset is current.
  std::error_code ec;
  std::filesystem::remove(StampPath(prefix), ec);
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, CreateTokenizer(spec.tokenizer));
  PreprocessConfig pc;
  pc.inputs = corpus;
  pc.input_format = InputFormat::kText;
  pc.document_separator = kSeparator;
  pc.output_prefix = config.shuffle_documents ? prefix + ".ordered" : prefix;
  pc.append_eod = spec.append_eod;
  pc.split_sentences = spec.split_sentences;
  pc.workers = config.workers;
  ASSIGN_OR_RETURN(*stats, Preprocess(pc, *tokenizer, progress));
  if (config.shuffle_documents) {
    RETURN_IF_ERROR(ShuffleDocuments(pc.output_prefix, prefix, config.shuffle_seed));
  }
  RETURN_IF_ERROR(WriteStamp(prefix, inputs));
  return true;
}

}  // namespace

std::string DefaultCorpusDir() { return EnvOr("MT_CORPUS_DIR", kDefaultCorpusDir); }

std::string DefaultDataDir() {
  const std::string home = EnvOr("HOME", "");
  return EnvOr("MT_DATA_DIR", home.empty() ? std::string("/tmp/megatron-cpp/data")
                                           : home + "/.cache/megatron-cpp/data");
}

absl::StatusOr<std::vector<std::string>> ListCorpusFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string hint =
      "; run ./bazelw once (tools/setup.sh installs the Debian fortunes package) or set "
      "$MT_CORPUS_DIR";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("corpus directory ", dir, " not found", hint));
  }
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (!it->is_regular_file(ec) || p.extension() == ".dat" || p.extension() == ".u8") continue;
    files.push_back(p.string());
  }
  if (ec) return ErrnoStatus(ec.value(), "cannot list corpus directory", dir);
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("no corpus files in ", dir, hint));
  }
  std::sort(files.begin(), files.end());
  return files;
}

absl::StatusOr<DefaultData> MakeDefaultData(const DefaultDataConfig& config,
                                            const ProgressCallback& progress) {
  ASSIGN_OR_RETURN(std::vector<std::string> corpus, ListCorpusFiles(config.corpus_dir));
  std::error_code ec;
  std::filesystem::create_directories(config.output_dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "cannot create data directory", config.output_dir);
  DefaultData data;
  data.gpt2_prefix = absl::StrCat(config.output_dir, "/", kGpt2DefaultDataName);
  data.bert_prefix = absl::StrCat(config.output_dir, "/", kBertDefaultDataName);
  ASSIGN_OR_RETURN(data.gpt2_built, MakeOne(kGpt2Spec, corpus, config, data.gpt2_prefix, progress,
                                            &data.gpt2_stats));
  ASSIGN_OR_RETURN(data.bert_built, MakeOne(kBertSpec, corpus, config, data.bert_prefix, progress,
                                            &data.bert_stats));
  return data;
}

}  // namespace data
}  // namespace mt
