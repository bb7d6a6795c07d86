// Whether a string is well-formed UTF-8: what the checkpoint's JSON (metadata.json, the
// safetensors header) may hold in names and opaque fields.
#ifndef MT_CHECKPOINT_UTF8_H_
#define MT_CHECKPOINT_UTF8_H_

#include "absl/strings/string_view.h"

namespace mt {
namespace checkpoint {

// No overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(absl::string_view s);

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_UTF8_H_
