// Settings declared once. A config struct lists its fields, each with its name and help text,
// in one static member template; its defaults are the members' initialisers:
//
//   struct TrainerConfig {
//     int64_t micro_batch_size = 4;
//     DecayStyle style = DecayStyle::kCosine;
//     template <typename Self, typename V>
//     static void Fields(Self& self, V& v) {
//       v("micro_batch_size", &self.micro_batch_size, "Samples per micro-batch per DP rank.");
//       v("lr_decay_style", &self.style, "Decay after warmup.", kDecayStyleNames);
//     }
//   };
//
// Everything that needs the list walks it with a visitor: the printed argument block
// (FieldsToText below), the JSON of a checkpoint's model config (core/fields_json.h), and the
// command-line flags of a binary (core/config_flags.h), so nothing repeats the
// fields by hand. A visitor is any object callable as
//   v(const char* name, T* value, const char* help)        T: int, int64_t, uint64_t, float,
//                                                           double, bool, std::string
//   v(const char* name, E* value, const char* help, EnumNames<E> names)   enums
// (with const T* when the struct is visited const).
#ifndef MT_CORE_FIELDS_H_
#define MT_CORE_FIELDS_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mt {

// The spelling of each value of an enum setting, e.g. {{"cosine", DecayStyle::kCosine}, ...}.
template <typename E>
using EnumNames = absl::Span<const std::pair<absl::string_view, E>>;

// The name of `value` ("?" if the table lacks it).
template <typename E>
absl::string_view EnumName(E value, EnumNames<E> names) {
  for (const auto& [name, v] : names) {
    if (v == value) return name;
  }
  return "?";
}

// The value named `name`; InvalidArgument "--<setting>=<name>: must be one of a, b, c" otherwise.
template <typename E>
absl::StatusOr<E> ParseEnum(absl::string_view setting, absl::string_view name, EnumNames<E> names) {
  for (const auto& [n, v] : names) {
    if (n == name) return v;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--", setting, "=", name, ": must be one of ",
      absl::StrJoin(names, ", ",
                    [](std::string* out, const auto& p) { absl::StrAppend(out, p.first); })));
}

namespace internal {

// Appends "name: value\n" per field.
class TextVisitor {
 public:
  explicit TextVisitor(std::string* out) : out_(out) {}
  template <typename T>
  void operator()(const char* name, const T* value, const char* /*help*/) {
    if constexpr (std::is_same_v<T, bool>) {
      absl::StrAppend(out_, name, ": ", *value ? "true" : "false", "\n");
    } else if constexpr (std::is_floating_point_v<T>) {
      absl::StrAppendFormat(out_, "%s: %g\n", name, static_cast<double>(*value));
    } else {
      absl::StrAppend(out_, name, ": ", *value, "\n");
    }
  }
  template <typename E, typename Names>
  void operator()(const char* name, const E* value, const char* /*help*/, const Names& names) {
    absl::StrAppend(out_, name, ": ", EnumName<E>(*value, names), "\n");
  }

 private:
  std::string* out_;
};

}  // namespace internal

// "name: value" lines of every field of `config` (floats as %g, bools as true/false, enums by
// name), in declaration order.
template <typename Config>
std::string FieldsToText(const Config& config) {
  std::string out;
  internal::TextVisitor v(&out);
  Config::Fields(config, v);
  return out;
}

}  // namespace mt

#endif  // MT_CORE_FIELDS_H_
