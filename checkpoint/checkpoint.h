// Sharded training checkpoints: one directory per iteration, one shard per tensor-parallel rank
// and pipeline stage, laid out and named as Megatron-LM does:
//
//   <dir>/latest_checkpointed_iteration.txt        "100\n": the newest complete checkpoint
//   <dir>/iter_0000100/mp_rank_00/model_optim.safetensors   this rank's tensors (safetensors
//                                                            format, readable by other tools)
//   <dir>/iter_0000100/mp_rank_00/metadata.json    model config, parallel layout, iteration,
//                                                  consumed samples, trainer state, and per tensor
//                                                  its global shape, partitioning and "sha256"
//   <dir>/iter_0000100/mp_rank_01/...
//
// With pipeline parallelism (pipeline_model_parallel_size PP > 1) the shard of TP rank TT on
// pipeline stage PPP is mp_rank_TT_PPP (mp_rank_01_003): TP x PP shards in all. Tensor names are
// the serial model's (a stage holding layers 4-7 names them layers.4 .. layers.7), so a stage's
// shard holds its own tensors under their global names, and a tensor two stages both hold (the
// tied word embedding of the first and the last stage) is in both shards: the same weights, and
// moments equal but for the distributed optimizer's rounding at DP >= 3 (the last stage's
// update is replaced by the first's); loading reads the first stage's copy.
//
// With expert parallelism (ep_size E > 1, CheckpointMetadata) every TP rank and stage has E
// shards, mp_rank_TT[_PPP]_EEE: the expert-parallel rank EEE writes its own experts (under
// their global indices, "experts" in metadata.json listing them), EP rank 0 the dense tensors
// too, so no rank gathers the others' experts. Every loader finds each name in whichever shard
// holds it (LoadResharded, ReshardCheckpoint), so such a checkpoint loads at any EP size, and a
// checkpoint holding every expert in one shard (ep_size 1) loads at any EP size as well.
//
// Integrity: each entry of metadata.json's "tensors" list carries "sha256", the lowercase hex
// SHA-256 of that tensor's bytes as stored in the shard's safetensors file (the byte range its
// data_offsets give past the header: `tail -c +$((8 + N + begin + 1)) FILE | head -c $((end -
// begin)) | sha256sum`), and "crc32c", the CRC32C (Castagnoli, as iSCSI and TFRecord use it;
// core/crc32c.h) of the same bytes as 8 lowercase hex digits, most significant first
// ("e3069283" for "123456789"; `python3 -c 'import crc32c,sys;
// print("%08x" % crc32c.crc32c(sys.stdin.buffer.read()))'` with Debian's python3-crc32c). Both
// are computed in one pass while the file is written. Every load path (LoadShard, LoadResharded,
// ReshardCheckpoint and the tools built on them) checks each tensor it reads, by default against
// its CRC32C (CheckpointVerify::kCrc32c: at several GB/s on one core, it keeps up with any disk;
// SHA-256 needs every core of a small machine to), on request against its SHA-256 (kSha256), or
// not at all (kNone): a changed byte is DataLoss "<file>: tensor '<name>' fails its CRC32C check
// ..." (or SHA-256). A tensor with only one of the two is checked against that one whatever the
// mode asks (checkpoints written before CRC32Cs have only "sha256"); checkpoints written before
// digests existed have neither and load unchecked, silently (both fields are optional in the
// format). A "crc32c" or "sha256" that is not of its form makes the metadata DataLoss.
//
// Saving is crash-safe at every point:
//   1. every TP rank of every pipeline stage (of data-parallel rank 0, or of each EP rank)
//      calls SaveShard(), which writes its shard into a hidden temporary directory, fsyncs the
//      files and the directory, and renames it to mp_rank_TT[_PPP][_EEE], so a shard directory
//      either is complete or does not exist;
//   2. after a barrier, one process calls CommitCheckpoint(), which checks that all shards exist,
//      atomically replaces latest_checkpointed_iteration.txt, and deletes old iterations.
// Until step 2 finishes the pointer names the previous checkpoint, which stays intact: a process
// killed at any moment leaves at worst an uncommitted iteration directory (ignored by loading, and
// overwritten or deleted by later saves) or hidden temporaries.
//
// Tensors are recorded with the partition metadata of nn::ParamSpec (global shape, split
// dimension), so ReshardCheckpoint() can rebuild each global tensor and split it for another TP
// degree and pipeline layout, and LoadResharded() can read any layout into any other. Vocabulary-
// padded tensors (the word embedding [padded_vocab, H], a BERT output bias [padded_vocab]) have
// their padded vocabulary on dimension 0, split across TP ranks; rows at or past the real
// vocabulary are padding and are zeroed by resharding.
//
// None of these functions is thread-safe with respect to another call on the same directory, except
// SaveShard for different ranks of the same iteration (which is how ranks use it).
#ifndef MT_CHECKPOINT_CHECKPOINT_H_
#define MT_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/file_system.h"
#include "core/tensor.h"

namespace mt {
namespace checkpoint {

constexpr char kLatestIterationFile[] = "latest_checkpointed_iteration.txt";
constexpr char kShardTensorsFile[] = "model_optim.safetensors";
constexpr char kShardMetadataFile[] = "metadata.json";

// "iter_0000100" (seven digits, more when needed).
std::string IterationDirName(int64_t iteration);
// "<dir>/iter_0000100", and the shard directory of TP rank tp_rank on pipeline stage pp_rank of
// pp_size: "<dir>/iter_0000100/mp_rank_01" (pp_size 1), "<dir>/iter_0000100/mp_rank_01_002".
std::string IterationDir(const std::string& dir, int64_t iteration);
// With ep_size > 1 the name ends in the expert-parallel rank: mp_rank_01_001 (pp_size 1),
// mp_rank_01_002_001.
std::string ShardDir(const std::string& dir, int64_t iteration, int tp_rank, int pp_rank = 0,
                     int pp_size = 1, int ep_rank = 0, int ep_size = 1);

// One tensor of a shard: this rank's slice `local` of a tensor whose serial-model shape is
// `global_shape`. With split_dim d >= 0, rank r of tp holds the contiguous slice
// [r * n / tp, (r + 1) * n / tp) of dimension d (n = global_shape[d], divisible by tp); with
// split_dim -1 every rank holds the whole tensor. `local` is a contiguous CPU view of any dtype
// (parameters, fp32 master weights, optimizer moments, integer counters).
// vocab_padded: dimension 0 is the padded vocabulary (requires split_dim 0).
struct TensorRecord {
  std::string name;
  Shape global_shape;
  int split_dim = -1;
  bool vocab_padded = false;
  TensorView local;
};

// Which digest loading checks each tensor against (see Integrity above); --checkpoint_verify.
enum class CheckpointVerify { kCrc32c, kSha256, kNone };
inline constexpr std::pair<absl::string_view, CheckpointVerify> kCheckpointVerifyNames[] = {
    {"crc32c", CheckpointVerify::kCrc32c},
    {"sha256", CheckpointVerify::kSha256},
    {"none", CheckpointVerify::kNone}};
// The help of every binary's --checkpoint_verify.
inline constexpr char kCheckpointVerifyHelp[] =
    "What loading a checkpoint checks each tensor against: crc32c (its CRC32C, fast enough to "
    "keep up with the disk), sha256 (its SHA-256, slower than a fast disk on a few cores) or "
    "none. A tensor with only one of the two (a checkpoint written before CRC32Cs) is checked "
    "against that one; a mismatch stops the load naming the tensor and file.";

struct CheckpointMetadata {
  // The model's configuration as a JSON object. LoadShard compares it key by key with the run's;
  // the reshard tool reads "vocab_size" and "make_vocab_size_divisible_by" from it. Returned by
  // LoadShard in canonical form (compact, keys sorted).
  std::string model_config_json;
  int tp_size = 1;
  int tp_rank = 0;
  int dp_size = 1;
  // The pipeline layout (metadata.json's pipeline_model_parallel_size and _rank; 1 and 0 in
  // checkpoints written before pipeline parallelism).
  int pp_size = 1;
  int pp_rank = 0;
  // Expert parallelism (metadata.json's expert_model_parallel_size and _rank; 1 and 0 in
  // checkpoints written before expert-parallel shards, and in every checkpoint saved without
  // expert parallelism, whose shards hold all experts). With ep_size E > 1 each TP rank and stage
  // has E shards, mp_rank_TT[_PPP]_EEE (Megatron's names): EP rank 0's holds the dense tensors
  // and its experts, each other EP rank's its experts only, all under their global names.
  int ep_size = 1;
  int ep_rank = 0;
  // The global indices of the experts whose tensors this shard holds (metadata.json's
  // "experts"; empty with ep_size 1). For the record and for checks: the tensor names say it too.
  std::vector<int> experts;
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  // Opaque to this layer (optimizer step, loss scale, RNG state, schedule): stored and returned
  // byte for byte. Must be UTF-8 (JSON is the intended content).
  std::string trainer_state_json;
  // The registered model (models/registry.h) the run started from (--model), for the record;
  // empty when the model came from flags, and in checkpoints written before this field existed.
  // The architecture itself is in the model config. Must be UTF-8.
  std::string model_name;
};

// Writes this rank's shard of checkpoint meta.iteration under save_dir (created if needed),
// atomically as described above; an existing shard of the same iteration and rank is replaced
// atomically. Call from one process per TP rank and pipeline stage (data-parallel rank 0).
// InvalidArgument for bad metadata (tp_rank outside [0, tp_size), pp_rank outside [0, pp_size),
// negative iteration, a model
// config that is not a JSON object) or a bad record (naming the tensor: split_dim out of range,
// global dimension not divisible by tp_size, local shape not the rank's slice, vocab_padded with
// split_dim != 0, non-contiguous or non-CPU view, duplicate name); errno-derived statuses naming
// the path for file-system errors (ResourceExhausted for a full disk).
absl::Status SaveShard(const std::string& save_dir, const CheckpointMetadata& meta,
                       const std::vector<TensorRecord>& tensors,
                       FileSystem& fs = DefaultFileSystem());

// Makes save_dir ready for checkpoints at start-up, before the training a failing save would
// lose: checks the way there without creating anything (a file on the way is FailedPrecondition
// "<path> is not a directory"; an existing ancestor this process may not write in is the errno
// status naming it), then creates save_dir (mkdir -p) and writes and removes a probe file in it
// (".write_probe.<host>.<pid>"), so a place that passes the permission check but refuses
// entries (as root, /proc/x; a read-only mount; a full disk) is an errno-derived status naming
// the path. Several processes may call it at once for the same directory.
absl::Status PrepareSaveDirectory(const std::string& save_dir,
                                  FileSystem& fs = DefaultFileSystem());

// Marks iteration `iteration` complete: checks that the tp_size x pp_size x ep_size shards all
// exist and agree (iteration, parallel layout, model config, file sizes), removes any other shard
// directory of that iteration (a save in another layout killed before its commit), atomically
// rewrites
// latest_checkpointed_iteration.txt, then deletes the oldest iter_* directories below `iteration`
// so that keep_last directories remain (keep_last <= 0 keeps all). Newer iter_* directories (left
// by a run that crashed before committing them) are left alone. Call once, after every rank's
// SaveShard has returned (barrier).
// FailedPrecondition naming the missing or inconsistent shard; DataLoss for an unreadable shard;
// errno-derived statuses for file-system errors.
absl::Status CommitCheckpoint(const std::string& save_dir, int64_t iteration, int tp_size,
                              int keep_last, int pp_size = 1, int ep_size = 1,
                              FileSystem& fs = DefaultFileSystem());

// The iteration named by load_dir/latest_checkpointed_iteration.txt, after checking that its
// directory holds every shard. NotFound if load_dir or the pointer file does not exist (no
// checkpoint yet); DataLoss if the pointer is not a number or names a missing or incomplete
// directory.
absl::StatusOr<int64_t> LatestIteration(const std::string& load_dir,
                                        FileSystem& fs = DefaultFileSystem());

// The metadata of one saved shard, TP rank tp_rank of pipeline stage pp_rank (of expert-parallel
// rank 0), whatever the pipeline and expert-parallel sizes (model_config_json in canonical form).
// NotFound if the shard does not exist; DataLoss if its metadata.json is malformed.
absl::StatusOr<CheckpointMetadata> ReadShardMetadata(const std::string& load_dir, int64_t iteration,
                                                     int tp_rank, int pp_rank = 0,
                                                     FileSystem& fs = DefaultFileSystem());

// Loads the shard of TP rank tp_rank on pipeline stage pp_rank of checkpoint `iteration` into
// `into` (each record's local view is filled;
// names, global shapes, split_dim, vocab_padded and dtypes must match the checkpoint's exactly) and
// returns its metadata in *meta (may be null).
// FailedPrecondition, before anything is written into `into`, when the checkpoint does not fit
// this run: saved with another tensor_model_parallel_size or pipeline_model_parallel_size (the
// message says to run the reshard tool) or with expert-parallel shards (read those with
// LoadResharded), a different model config (the message lists the differing
// keys), a tensor missing from the checkpoint or from `into`, or a tensor whose shape, partitioning
// or dtype differs (named). NotFound if the shard does not exist; DataLoss for corrupt files,
// including a tensor whose bytes fail their digest (CRC32C or SHA-256, as `verify` says; `into` may
// then be partly overwritten);
// InvalidArgument for a bad `into` (non-contiguous view, local shape not the rank's slice, expected
// config not JSON).
absl::Status LoadShard(const std::string& load_dir, int64_t iteration, int tp_rank, int tp_size,
                       const std::string& expected_model_config_json,
                       const std::vector<TensorRecord>& into, CheckpointMetadata* meta,
                       int pp_rank = 0, int pp_size = 1, FileSystem& fs = DefaultFileSystem(),
                       CheckpointVerify verify = CheckpointVerify::kCrc32c);

// How LoadResharded treats names that are not in both the checkpoint and the caller's records.
struct ReshardedLoadOptions {
  // Records the checkpoint lacks are left as they are and listed in ReshardedLoad::missing
  // (e.g. a new task head keeping its initial values); false: FailedPrecondition.
  bool allow_missing = false;
  // Checkpoint tensors that no record names are skipped and listed in ReshardedLoad::ignored
  // (e.g. pretraining heads a fine-tuned model does not have); false: FailedPrecondition.
  bool allow_unexpected = false;
  // Checkpoint tensors whose names start with one of these are skipped and not listed (e.g.
  // "optimizer." for inference).
  std::vector<std::string> skip_prefixes;
  // A vocab-padded tensor read at the shape and TP degree it was saved with keeps its padding
  // rows as stored (resuming training bit for bit); false: they come out zero, as at any other.
  bool keep_padding_rows = false;
  // Non-empty: the model config (JSON) the checkpoint must have been saved with;
  // FailedPrecondition listing the differing keys otherwise (as LoadShard).
  std::string expected_model_config_json;
  // Which digest of each tensor is checked.
  CheckpointVerify verify = CheckpointVerify::kCrc32c;
};

struct ReshardedLoad {
  CheckpointMetadata
      meta;  // Shard 0's of stage 0 (tp_size, pp_size: the layout it was saved with).
  std::vector<std::string> missing;  // Records the checkpoint lacks, in record order.
  std::vector<std::string> ignored;  // Checkpoint tensors no record names, in stored order.
};

// Fills this rank's slices `into` (laid out for tp_size ranks: each record's local view is rank
// tp_rank's slice of its global shape) from checkpoint `iteration` of load_dir, whatever TP degree
// and pipeline layout it was saved with: each name is looked up in every pipeline stage's shards
// (the first stage holding it is read; a pipeline stage of this run passes its own records and
// allow_unexpected, as the other stages' tensors are not its own), and likewise in every
// expert-parallel shard (an expert is read from the shard holding it, at whatever EP size the
// checkpoint was saved; an expert-parallel rank of this run passes its own experts' records); a
// tensor saved with the same global shape and degree is read directly from shard tp_rank of its
// stage; any other is reassembled from that stage's shards (as ReshardCheckpoint does, one tensor
// at a time) and sliced. Vocab-padded tensors may differ in their padded row count: the first
// real_vocab rows are copied and the padding rows come out zero (also at the same degree, unless
// options.keep_padding_rows). Names are matched exactly; the model config is compared only when
// options.expected_model_config_json is given (else the caller decides what it builds). Nothing is
// written into `into` until every check has passed. Errors: InvalidArgument for bad arguments
// (tp_rank outside [0, tp_size), real_vocab < 1, a record as LoadShard refuses it, a duplicate
// name); NotFound if the checkpoint or one of its shards does not exist; DataLoss for corrupt files
// (a tensor failing its digest, as options.verify says: `into` may then be partly overwritten; two
// stages holding
// one name with different shapes); FailedPrecondition for a model config other than
// options.expected_model_config_json (listing the keys); FailedPrecondition, naming the checkpoint
// and the tensor, for a tensor whose partitioning, global shape (besides padded rows) or dtype
// differs from its record's, a vocab-padded tensor with fewer than real_vocab rows on either side,
// or the missing / ignored names when not allowed (listing them).
absl::StatusOr<ReshardedLoad> LoadResharded(const std::string& load_dir, int64_t iteration,
                                            int tp_rank, int tp_size, int64_t real_vocab,
                                            const std::vector<TensorRecord>& into,
                                            const ReshardedLoadOptions& options = {},
                                            FileSystem& fs = DefaultFileSystem());

// Converts checkpoint `iteration` of src_dir (any TP degree and pipeline layout) into a committed
// checkpoint of the same iteration in dst_dir with new_tp_size shards and one pipeline stage. Each
// tensor's global value is reassembled from the source slices and re-split; vocab_padded tensors
// keep their first real_vocab rows and are zero-padded (or truncated) to new_padded_vocab rows.
// Metadata is copied with tp_size and tp_rank changed (every new rank gets source rank 0's trainer
// state and replicated tensors). Expert-parallel shards are read as LoadResharded reads them and
// written in one shard per TP rank and stage (ep_size 1: every expert, as loadable at any EP).
// Holds the whole model in memory, plus one new shard. InvalidArgument for bad arguments
// (new_tp_size < 1, real_vocab larger than a source tensor's padded vocabulary or than
// new_padded_vocab, new_padded_vocab not divisible by new_tp_size, a split dimension not divisible
// by new_tp_size (naming the tensor), dst_dir equal to src_dir); AlreadyExists if dst_dir already
// holds that iteration; NotFound / DataLoss / FailedPrecondition for a missing, corrupt or
// incomplete source.
absl::Status ReshardCheckpoint(const std::string& src_dir, int64_t iteration,
                               const std::string& dst_dir, int new_tp_size, int64_t real_vocab,
                               int64_t new_padded_vocab, FileSystem& fs = DefaultFileSystem());

// The layout ReshardCheckpoint writes.
struct ReshardLayout {
  int tp_size = 1;
  int64_t padded_vocab = 0;  // The vocab-padded tensors' rows (a multiple of tp_size).
  int pp_size = 1;
  // With pp_size > 1: the pipeline stages in [0, pp_size) whose shards hold the tensor of this
  // name (the tied word embedding: the first and the last). Which layers a stage holds is the
  // model's business (models/stages.h, StageParameterNames), not this layer's.
  std::function<std::vector<int>(const std::string& name)> stages_of;
  // Which digest of each source tensor is checked.
  CheckpointVerify verify = CheckpointVerify::kCrc32c;
};

// ReshardCheckpoint into any layout: every tensor of the source (any TP degree and pipeline
// layout; a tensor several stages hold is read from the first) is re-split for layout.tp_size
// and written into the shards of the stages layout.stages_of names. Besides the errors above:
// InvalidArgument for pp_size < 1, a missing stages_of with pp_size > 1, or a tensor that
// stages_of places nowhere or out of range (naming it), and for a stage that would hold nothing.
absl::Status ReshardCheckpoint(const std::string& src_dir, int64_t iteration,
                               const std::string& dst_dir, int64_t real_vocab,
                               const ReshardLayout& layout, FileSystem& fs = DefaultFileSystem());

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_CHECKPOINT_H_
