#include "data/tokenizers/fuzz_checks.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "glog/logging.h"

namespace mt::data {

std::string CheckEncodeDecode(const Tokenizer& tokenizer, absl::string_view text) {
  const std::vector<int32_t> ids = tokenizer.Encode(text);
  for (int32_t id : ids) CHECK(id >= 0 && id < tokenizer.vocab_size()) << id;
  auto decoded = tokenizer.Decode(ids);
  CHECK(decoded.ok()) << decoded.status();
  return *decoded;
}

void CheckDecodeOfArbitraryIds(const Tokenizer& tokenizer, absl::string_view bytes) {
  std::vector<int32_t> ids;
  bool in_range = true;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    ids.push_back(static_cast<uint8_t>(bytes[i]) | (static_cast<uint8_t>(bytes[i + 1]) << 8));
    in_range = in_range && ids.back() < tokenizer.vocab_size();
  }
  auto decoded = tokenizer.Decode(ids);
  CHECK(in_range ? decoded.ok() : absl::IsInvalidArgument(decoded.status())) << decoded.status();
}

}  // namespace mt::data
