// Command-line flags derived from a config struct's field table (core/fields.h): one gflags flag
// per field, with the field's name, help and default, so a binary declares no flag by hand for
// a setting that lives in a config.
//
//   int main(int argc, char** argv) {
//     PretrainGptConfig defaults;                 // The binary's defaults.
//     ConfigFlags<PretrainGptConfig> flags(defaults, {"family"});  // Before parsing.
//     gflags::ParseCommandLineFlags(&argc, &argv, true);
//     PretrainGptConfig c = defaults;
//     RETURN_IF_ERROR(flags.ApplyGiven(&c));   // Every flag given on the command line.
//
// gflags types: int -> int32, int64_t -> int64, uint64_t -> uint64, float and double -> double,
// bool, std::string; an enum is a string flag holding one of its names (checked by ApplyGiven:
// "--lr_decay_style=exp: must be one of constant, linear, cosine").
//
// Flags register once per process (gflags keeps them for the program's life), so make one
// ConfigFlags per config type in main(). Not thread-safe (nor is gflags' parsing).
#ifndef MT_CORE_CONFIG_FLAGS_H_
#define MT_CORE_CONFIG_FLAGS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/fields.h"
#include "gflags/gflags.h"

namespace mt {

namespace internal {

// The gflags type holding a field of type T.
template <typename T>
using FlagType = std::conditional_t<
    std::is_same_v<T, bool>, bool,
    std::conditional_t<
        std::is_floating_point_v<T>, double,
        std::conditional_t<
            std::is_same_v<T, int> || std::is_same_v<T, int32_t>, int32_t,
            std::conditional_t<std::is_same_v<T, uint64_t>, uint64_t,
                               std::conditional_t<std::is_integral_v<T>, int64_t, std::string>>>>>;

// Storage for the flags' current and default values, and where each flag's current value is.
// Never freed: gflags keeps pointers into it for the program's life.
struct FlagStorage {
  std::deque<bool> bools;
  std::deque<int32_t> int32s;
  std::deque<int64_t> int64s;
  std::deque<uint64_t> uint64s;
  std::deque<double> doubles;
  std::deque<std::string> strings;
  std::map<std::string, void*> current;  // Flag name -> its current value (of its FlagType).

  template <typename F>
  F* New(const F& value) {
    if constexpr (std::is_same_v<F, bool>) return &bools.emplace_back(value);
    if constexpr (std::is_same_v<F, int32_t>) return &int32s.emplace_back(value);
    if constexpr (std::is_same_v<F, int64_t>) return &int64s.emplace_back(value);
    if constexpr (std::is_same_v<F, uint64_t>) return &uint64s.emplace_back(value);
    if constexpr (std::is_same_v<F, double>) return &doubles.emplace_back(value);
    if constexpr (std::is_same_v<F, std::string>) return &strings.emplace_back(value);
  }
};

// A new FlagStorage that lives as long as the program: gflags points into it to the end, so it
// stays reachable from a static list (not a leak to LeakSanitizer) and is never freed.
inline FlagStorage* NewProgramLongFlagStorage() {
  static auto* const all = new std::vector<std::unique_ptr<FlagStorage>>();
  all->push_back(std::make_unique<FlagStorage>());
  return all->back().get();
}

// Registers a flag per field not in `skip`.
class Registrar {
 public:
  Registrar(FlagStorage* storage, const std::set<std::string>& skip, const char* file)
      : storage_(storage), skip_(skip), file_(file) {}
  template <typename T>
  void operator()(const char* name, const T* value, const char* help) {
    Register(name, help, static_cast<FlagType<T>>(*value));
  }
  template <typename E, typename Names>
  void operator()(const char* name, const E* value, const char* help, const Names& names) {
    Register(name, help, std::string(EnumName<E>(*value, names)));
  }

 private:
  template <typename F>
  void Register(const char* name, const char* help, const F& value) {
    if (skip_.count(name) > 0) return;
    F* current = storage_->New<F>(value);
    storage_->current[name] = current;
    // gflags keeps the name and help pointers (the field tables' literals live forever) and the
    // two values (in storage_); the registerer itself holds nothing once it has registered.
    const gflags::FlagRegisterer registered(name, help, file_, current, storage_->New<F>(value));
    (void)registered;
  }
  FlagStorage* storage_;
  const std::set<std::string>& skip_;
  const char* file_;
};

// Copies every flag given on the command line into its field.
class Applier {
 public:
  explicit Applier(const FlagStorage& storage) : storage_(storage) {}
  template <typename T>
  void operator()(const char* name, T* value, const char* /*help*/) {
    if (const auto* flag = Given<FlagType<T>>(name)) *value = static_cast<T>(*flag);
  }
  template <typename E, typename Names>
  void operator()(const char* name, E* value, const char* /*help*/, const Names& names) {
    const std::string* flag = Given<std::string>(name);
    if (flag == nullptr) return;
    absl::StatusOr<E> e = ParseEnum<E>(name, *flag, names);
    if (e.ok()) {
      *value = *e;
    } else if (status_.ok()) {
      status_ = e.status();
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  // The flag's value if it was given on the command line, else null.
  template <typename F>
  const F* Given(const char* name) const {
    auto it = storage_.current.find(name);
    gflags::CommandLineFlagInfo info;
    if (it == storage_.current.end() || !gflags::GetCommandLineFlagInfo(name, &info) ||
        info.is_default) {
      return nullptr;
    }
    return static_cast<const F*>(it->second);
  }
  const FlagStorage& storage_;
  absl::Status status_;
};

}  // namespace internal

template <typename Config>
class ConfigFlags {
 public:
  // Registers a flag for every field of `defaults` except those named in `skip`, with the
  // field's value in `defaults` as the flag's default. `file` is where gflags says the flags are
  // defined (--helpshort lists those of the program's main file, <program>_main.cc): by default
  // the file that makes this object; a main() helper in a header passes its caller's on.
  explicit ConfigFlags(const Config& defaults, const std::set<std::string>& skip = {},
                       const char* file = __builtin_FILE())
      : storage_(internal::NewProgramLongFlagStorage()) {
    internal::Registrar r(storage_, skip, file);
    Config::Fields(defaults, r);
  }

  // Sets every field whose flag was given on the command line (after parsing) to the flag's
  // value; the other fields keep theirs. InvalidArgument naming the flag for an enum value that
  // is not one of its names.
  absl::Status ApplyGiven(Config* config) const {
    internal::Applier a(*storage_);
    Config::Fields(*config, a);
    return a.status();
  }
  // ApplyGiven, then config->Validate() (for a Config with an absl::Status Validate() const).
  absl::Status ApplyGivenAndValidate(Config* config) const {
    const absl::Status s = ApplyGiven(config);
    return s.ok() ? config->Validate() : s;
  }
  // `config` with every flag given on the command line applied; ApplyGiven's errors.
  absl::StatusOr<Config> WithGiven(Config config) const {
    const absl::Status s = ApplyGiven(&config);
    if (!s.ok()) return s;
    return config;
  }

 private:
  internal::FlagStorage* storage_;  // Program-long (NewProgramLongFlagStorage).
};

// Whether --name was given on the command line (false for an unknown flag).
inline bool FlagGiven(const char* name) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(name, &info) && !info.is_default;
}

}  // namespace mt

#endif  // MT_CORE_CONFIG_FLAGS_H_
