// Flags registered from a field table take the field's default and help, reach the config only
// when given on the command line, and reject an enum value that is not one of its names.
#include "core/config_flags.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

enum class Mode { kFast, kSafe };
constexpr std::pair<absl::string_view, Mode> kModeNames[] = {{"fast", Mode::kFast},
                                                             {"safe", Mode::kSafe}};

struct Inner {
  float ratio = 0.25f;
  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("ratio", &self.ratio, "A float (a double flag).");
  }
};

struct Settings {
  int layers = 4;
  int64_t samples = int64_t{1} << 33;
  uint64_t seed = 1234;
  double lr = 1.5e-4;
  bool overlap = true;
  std::string path = "data";
  Mode mode = Mode::kSafe;
  int hidden = 7;  // Not a flag (skipped).
  Inner inner;
  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("layers", &self.layers, "Layers.");
    v("samples", &self.samples, "Samples.");
    v("seed", &self.seed, "Seed.");
    v("lr", &self.lr, "Learning rate.");
    v("overlap", &self.overlap, "Overlap.");
    v("path", &self.path, "Path.");
    v("mode", &self.mode, "Mode.", kModeNames);
    v("hidden", &self.hidden, "Not registered.");
    Inner::Fields(self.inner, v);
  }
};

// Parses `args` (after the program name) as a binary would.
void Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "config_flags_test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  char** p = argv.data();
  gflags::ParseCommandLineFlags(&argc, &p, /*remove_flags=*/false);
}

TEST(ConfigFlagsTest, RegistersFromTheTableAndAppliesWhatIsGiven) {
  Settings defaults;
  defaults.layers = 12;  // A binary's own default.
  const ConfigFlags<Settings> flags(defaults, {"hidden"});
  gflags::CommandLineFlagInfo info;
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("layers", &info));
  EXPECT_EQ(info.default_value, "12");
  EXPECT_EQ(info.type, "int32");
  EXPECT_EQ(info.description, "Layers.");
  // Defined where the ConfigFlags is made (--helpshort lists the flags of <program>_main.cc).
  EXPECT_TRUE(absl::EndsWith(info.filename, "core/config_flags_test.cc")) << info.filename;
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("mode", &info));
  EXPECT_EQ(info.default_value, "safe");
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("ratio", &info));
  EXPECT_EQ(info.type, "double");
  EXPECT_FALSE(gflags::GetCommandLineFlagInfo("hidden", &info));

  Parse({"--samples=17179869184", "--seed=18446744073709551615", "--lr=3e-3", "--nooverlap",
         "--path=/x", "--mode=fast", "--ratio=0.5", "--layers=12"});
  Settings s;
  s.layers = 2;
  s.hidden = 9;
  ASSERT_TRUE(flags.ApplyGiven(&s).ok());
  EXPECT_EQ(s.layers, 12);  // Given (even though equal to the default).
  EXPECT_EQ(s.samples, int64_t{1} << 34);
  EXPECT_EQ(s.seed, 18446744073709551615u);
  EXPECT_EQ(s.lr, 3e-3);
  EXPECT_FALSE(s.overlap);
  EXPECT_EQ(s.path, "/x");
  EXPECT_EQ(s.mode, Mode::kFast);
  EXPECT_EQ(s.inner.ratio, 0.5f);
  EXPECT_EQ(s.hidden, 9);  // Not a flag: untouched.
  EXPECT_TRUE(FlagGiven("layers"));
  EXPECT_FALSE(FlagGiven("hidden"));
  // WithGiven: the same on a copy; what was not given keeps the copy's value.
  Settings base;
  base.hidden = 5;
  base.inner.ratio = 0.25f;
  const absl::StatusOr<Settings> copy = flags.WithGiven(base);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->layers, 12);
  EXPECT_EQ(copy->mode, Mode::kFast);
  EXPECT_EQ(copy->inner.ratio, 0.5f);
  EXPECT_EQ(copy->hidden, 5);
  EXPECT_EQ(base.layers, Settings().layers);  // The argument is a copy.

  Parse({"--mode=turbo"});
  const absl::Status bad = flags.ApplyGiven(&s);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "--mode=turbo: must be one of fast, safe");
  EXPECT_EQ(flags.WithGiven(base).status(), bad);
}

}  // namespace
}  // namespace mt
