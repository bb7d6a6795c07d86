// A config's fields (core/fields.h) as a JSON object and back: the model config a checkpoint
// stores (models/config.h) is written and read this way, so its keys are the field names.
//
// Writing: numbers, bools and strings as themselves (floats as the double of their value), enums
// by name; empty strings are left out (an empty string setting means "the default", and so reads
// back as one). Reading: every key present must have the field's type (an integer in range for
// integer fields, a known name for enums); missing keys keep the config's current values; keys
// that are not fields are ignored (the caller compares configs field by field where it matters).
#ifndef MT_CORE_FIELDS_JSON_H_
#define MT_CORE_FIELDS_JSON_H_

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/fields.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace internal {

class JsonWriter {
 public:
  explicit JsonWriter(nlohmann::json* out) : out_(out) {}
  template <typename T>
  void operator()(const char* name, const T* value, const char* /*help*/) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (value->empty()) return;
    }
    (*out_)[name] = *value;
  }
  template <typename E, typename Names>
  void operator()(const char* name, const E* value, const char* /*help*/, const Names& names) {
    (*out_)[name] = std::string(EnumName<E>(*value, names));
  }

 private:
  nlohmann::json* out_;
};

class JsonReader {
 public:
  explicit JsonReader(const nlohmann::json& in) : in_(in) {}
  template <typename T>
  void operator()(const char* name, T* value, const char* /*help*/) {
    if (!status_.ok() || !in_.contains(name)) return;
    const nlohmann::json& j = in_[name];
    if constexpr (std::is_same_v<T, bool>) {
      if (!j.is_boolean()) return Fail(name, "a boolean");
      *value = j.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      const bool fits =
          j.is_number_integer() &&
          (j.is_number_unsigned()
               ? j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
               : j.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                     j.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max()));
      if (!fits) return Fail(name, "an integer in range");
      *value = j.get<T>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!j.is_number()) return Fail(name, "a number");
      *value = static_cast<T>(j.get<double>());
    } else {
      if (!j.is_string()) return Fail(name, "a string");
      *value = j.get<std::string>();
    }
  }
  template <typename E, typename Names>
  void operator()(const char* name, E* value, const char* /*help*/, const Names& names) {
    if (!status_.ok() || !in_.contains(name)) return;
    const nlohmann::json& j = in_[name];
    if (!j.is_string()) return Fail(name, "a string");
    absl::StatusOr<E> e = ParseEnum<E>(name, j.get<std::string>(), names);
    if (!e.ok()) {
      status_ =
          absl::InvalidArgumentError(absl::StrCat("key \"", name, "\": ", e.status().message()));
      return;
    }
    *value = *e;
  }
  const absl::Status& status() const { return status_; }

 private:
  void Fail(const char* name, const char* expected) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("key \"", name, "\" must be ", expected, ", got ", in_[name].dump()));
  }
  const nlohmann::json& in_;
  absl::Status status_;
};

}  // namespace internal

// Every field of `config` as a JSON object.
template <typename Config>
nlohmann::json FieldsToJson(const Config& config) {
  nlohmann::json out = nlohmann::json::object();
  internal::JsonWriter v(&out);
  Config::Fields(config, v);
  return out;
}

// Reads the fields present in the JSON object `in` into *config. InvalidArgument naming the key
// when `in` is not an object or a value has the wrong type (*config is then partly updated).
template <typename Config>
absl::Status FieldsFromJson(const nlohmann::json& in, Config* config) {
  if (!in.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("expected a JSON object, got ", in.dump()));
  }
  internal::JsonReader v(in);
  Config::Fields(*config, v);
  return v.status();
}

}  // namespace mt

#endif  // MT_CORE_FIELDS_JSON_H_
