// Writes a tiny Hugging Face GPT-2 or BERT directory with random weights (hf_testutil.h) for the
// converter's end-to-end test (eval/convert_checkpoint_test.sh). testonly.
//
//   hf_test_model --family=gpt2 --save=DIR [--vocab=50257 --hidden=16 --layers=2 --heads=4
//       --positions=64 --seed=1 --dtype=f32 --omit=ln_f.weight]
//
// Errors are one line on stderr with a non-zero exit.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "checkpoint/hf_testutil.h"
#include "core/dtype.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"

DEFINE_string(family, "gpt2", "gpt2 (GPT2LMHeadModel) or bert (BertForPreTraining).");
DEFINE_string(save, "", "The directory to write (created).");
DEFINE_int64(vocab, 50257, "vocab_size.");
DEFINE_int64(hidden, 16, "Hidden size.");
DEFINE_int32(layers, 2, "Transformer layers.");
DEFINE_int32(heads, 4, "Attention heads.");
DEFINE_int64(positions, 64, "Position embeddings.");
DEFINE_uint64(seed, 1, "Seed of the random weights.");
DEFINE_string(dtype, "f32", "File dtype: f32, bf16 or f16.");
DEFINE_string(omit, "", "Comma-separated canonical tensor names to leave out of the file.");

namespace {

absl::Status Run() {
  if (FLAGS_save.empty()) return absl::InvalidArgumentError("--save is required");
  auto dtype = mt::ParseDType(FLAGS_dtype);
  if (!dtype.ok() || !mt::IsFloating(*dtype))
    return absl::InvalidArgumentError("--dtype must be f32, bf16 or f16");
  mt::checkpoint::testing::HfTestOptions o;
  o.dtype = *dtype;
  o.seed = FLAGS_seed;
  o.layers = FLAGS_layers;
  o.heads = FLAGS_heads;
  o.hidden = FLAGS_hidden;
  o.vocab = FLAGS_vocab;
  o.positions = FLAGS_positions;
  mt::checkpoint::testing::HfTestModel model;
  if (FLAGS_family == "gpt2") {
    model = mt::checkpoint::testing::TinyGpt2(o);
  } else if (FLAGS_family == "bert") {
    model = mt::checkpoint::testing::TinyBert(o);
  } else {
    return absl::InvalidArgumentError("--family must be gpt2 or bert");
  }
  mt::checkpoint::testing::HfWriteOptions w;
  if (!FLAGS_omit.empty()) w.omit = absl::StrSplit(FLAGS_omit, ',');
  const absl::Status status = mt::checkpoint::testing::WriteHfModel(model, FLAGS_save, w);
  if (!status.ok()) return status;
  std::printf("wrote %s (%s, vocab %lld)\n", FLAGS_save.c_str(), FLAGS_family.c_str(),
              static_cast<long long>(FLAGS_vocab));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return mt::ToolMain("hf_test_model", "Writes a tiny Hugging Face GPT-2 or BERT directory.", argc,
                      argv, Run);
}
