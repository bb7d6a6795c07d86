// Builds a tokenizer by name from the assets tools/setup.sh installed (assets.h).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, CreateTokenizer("gpt2"));
//   std::vector<int32_t> ids = tok->Encode("Hello world");   // {15496, 995}
//   ASSIGN_OR_RETURN(std::string text, tok->Decode(ids));     // "Hello world"
#ifndef MT_DATA_TOKENIZERS_FACTORY_H_
#define MT_DATA_TOKENIZERS_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/tokenizer.h"

namespace mt::data {

// Names CreateTokenizer accepts: "gpt2" (GPT-2 byte-level BPE, 50257 ids) and "bert"
// (bert-base-uncased WordPiece, 30522 ids).
std::vector<std::string> TokenizerNames();

// InvalidArgument for an unknown name (listing the known ones); NotFound when an asset is missing
// (saying how to install it); DataLoss when an asset file is malformed.
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(absl::string_view name);

}  // namespace mt::data

#endif  // MT_DATA_TOKENIZERS_FACTORY_H_
