// Tokenizes a file, or decodes token ids back to text.
//
//   bazel run //data:tokenize -- --tokenizer=gpt2 --input=FILE           # ids, one line
//   bazel run //data:tokenize -- --tokenizer=bert --input=IDS --decode   # text
//
// Encoding prints the ids of the file's whole text, space-separated, on one line. Decoding reads
// whitespace-separated ids and prints their text exactly (no newline is added). Assets come from
// $MT_ASSETS_DIR (default /opt/megatron-cpp), installed by ./bazelw (tools/setup.sh). Errors are
// one line on stderr and a non-zero exit.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/tool_main.h"
#include "data/tokenizers/factory.h"
#include "gflags/gflags.h"

DEFINE_string(tokenizer, "", "Tokenizer: gpt2 or bert.");
DEFINE_string(input, "",
              "File to read: text to encode, or whitespace-separated ids with --decode.");
DEFINE_bool(decode, false, "Read token ids from --input and print their text.");

namespace mt::data {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open --input=", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return std::move(ss).str();
}

absl::Status Run() {
  if (FLAGS_tokenizer.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokenizer is required (", absl::StrJoin(TokenizerNames(), " or "), ")"));
  }
  if (FLAGS_input.empty()) return absl::InvalidArgumentError("--input is required");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = CreateTokenizer(FLAGS_tokenizer);
  if (!tok.ok()) return tok.status();
  absl::StatusOr<std::string> input = ReadFile(FLAGS_input);
  if (!input.ok()) return input.status();

  if (!FLAGS_decode) {
    const std::vector<int32_t> ids = (*tok)->Encode(*input);
    std::string line = absl::StrJoin(ids, " ");
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stdout);
    return absl::OkStatus();
  }
  std::vector<int32_t> ids;
  for (absl::string_view field :
       absl::StrSplit(*input, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(field, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(FLAGS_input, ": '", field, "' is not a token id"));
    }
    ids.push_back(id);
  }
  absl::StatusOr<std::string> text = (*tok)->Decode(ids);
  if (!text.ok()) return text.status();
  std::fwrite(text->data(), 1, text->size(), stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace mt::data

int main(int argc, char** argv) {
  return mt::ToolMain(
      "tokenize",
      "--tokenizer=gpt2|bert --input=FILE [--decode]\n"
      "Prints the token ids of FILE's text on one line, or with --decode the text of the ids.",
      argc, argv, mt::data::Run);
}
