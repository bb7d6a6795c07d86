#include "models/multiple_choice.h"

#include "absl/strings/str_cat.h"

namespace mt {
namespace models {

absl::StatusOr<MultipleChoiceModel*> MultipleChoiceOf(Model& model) {
  MultipleChoiceModel* multiple_choice = model.multiple_choice();
  if (multiple_choice == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "architecture '", model.config().ArchitectureName(), "' has no multiple-choice head"));
  }
  return multiple_choice;
}

}  // namespace models
}  // namespace mt
