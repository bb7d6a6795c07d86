#include "data/tokenizers/testutil.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/status_testutil.h"
#include "data/tokenizers/factory.h"
#include "glog/logging.h"

namespace mt {
namespace data {
namespace testing {

absl::StatusOr<const Tokenizer*> TestTokenizer(absl::string_view name) {
  static std::mutex mu;
  static auto* const made = new std::map<std::string, std::unique_ptr<Tokenizer>>();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<Tokenizer>& tok = (*made)[std::string(name)];
  if (tok == nullptr) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(name);
    if (!t.ok()) return t.status();
    tok = std::move(t).value();
  }
  return tok.get();
}

void TokenizerTest::SetUp() {
  ASSERT_OK(TestTokenizer("gpt2").status());
  ASSERT_OK(TestTokenizer("bert").status());
}

namespace {

const Tokenizer& Made(absl::string_view name) {
  absl::StatusOr<const Tokenizer*> t = TestTokenizer(name);
  CHECK(t.ok()) << "the " << name << " tokenizer, used outside a TokenizerTest: " << t.status();
  return **t;
}

}  // namespace

const Tokenizer& Gpt2() { return Made("gpt2"); }
const Tokenizer& Bert() { return Made("bert"); }

}  // namespace testing
}  // namespace data
}  // namespace mt
