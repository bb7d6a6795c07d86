#include "models/incremental_decoder.h"

#include "absl/strings/str_cat.h"

namespace mt {
namespace models {

absl::StatusOr<IncrementalDecoder*> IncrementalDecoderOf(Model& model) {
  IncrementalDecoder* decoder = model.incremental_decoder();
  if (decoder == nullptr) {
    return absl::UnimplementedError(absl::StrCat("architecture '",
                                                 model.config().ArchitectureName(),
                                                 "' has no incremental decoding (generation)"));
  }
  return decoder;
}

}  // namespace models
}  // namespace mt
