// The field table of a config struct drives its text form and its JSON form; both are checked
// against hand-written expectations, and the JSON reader against every kind of bad value.
#include "core/fields.h"

#include <cstdint>
#include <string>

#include "core/fields_json.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

enum class Color { kRed, kGreen };
constexpr std::pair<absl::string_view, Color> kColorNames[] = {{"red", Color::kRed},
                                                               {"green", Color::kGreen}};

struct Sample {
  int count = 3;
  int64_t big = int64_t{1} << 40;
  uint64_t seed = 7;
  float ratio = 0.1f;
  double rate = 2.5e-4;
  bool on = true;
  std::string path;
  Color color = Color::kGreen;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("count", &self.count, "A count.");
    v("big", &self.big, "A large number.");
    v("seed", &self.seed, "A seed.");
    v("ratio", &self.ratio, "A float.");
    v("rate", &self.rate, "A double.");
    v("on", &self.on, "A switch.");
    v("path", &self.path, "A path.");
    v("color", &self.color, "A color.", kColorNames);
  }
};

TEST(FieldsTest, TextListsEveryFieldInOrder) {
  Sample s;
  s.path = "/tmp/x";
  EXPECT_EQ(FieldsToText(s),
            "count: 3\nbig: 1099511627776\nseed: 7\nratio: 0.1\nrate: 0.00025\non: true\n"
            "path: /tmp/x\ncolor: green\n");
}

TEST(FieldsTest, JsonRoundTripAndEmptyStringsLeftOut) {
  Sample s;
  s.count = -5;
  s.color = Color::kRed;
  s.on = false;
  const nlohmann::json j = FieldsToJson(s);
  EXPECT_FALSE(j.contains("path"));  // Empty: the default.
  EXPECT_EQ(j["color"], "red");
  EXPECT_EQ(j["ratio"].get<double>(), static_cast<double>(0.1f));
  Sample back;
  back.path = "kept";
  ASSERT_TRUE(FieldsFromJson(j, &back).ok());
  EXPECT_EQ(back.count, -5);
  EXPECT_EQ(back.big, int64_t{1} << 40);
  EXPECT_EQ(back.color, Color::kRed);
  EXPECT_FALSE(back.on);
  EXPECT_EQ(back.ratio, 0.1f);
  EXPECT_EQ(back.path, "kept");  // Missing keys keep the current value.
}

TEST(FieldsTest, JsonReaderRejectsWrongTypesNamingTheKey) {
  const std::pair<const char*, const char*> bad[] = {
      {R"({"count": "3"})", "key \"count\" must be an integer in range"},
      {R"({"count": 3.5})", "key \"count\" must be an integer in range"},
      {R"({"count": 3000000000})", "key \"count\" must be an integer in range"},
      {R"({"seed": -1})", "key \"seed\" must be an integer in range"},
      {R"({"on": 1})", "key \"on\" must be a boolean"},
      {R"({"rate": "fast"})", "key \"rate\" must be a number"},
      {R"({"path": 3})", "key \"path\" must be a string"},
      {R"({"color": "blue"})", "key \"color\": --color=blue: must be one of red, green"},
  };
  for (const auto& [json, message] : bad) {
    Sample s;
    const absl::Status st = FieldsFromJson(nlohmann::json::parse(json), &s);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_NE(st.message().find(message), std::string::npos) << json << ": " << st.message();
  }
  Sample s;
  EXPECT_EQ(FieldsFromJson(nlohmann::json::array(), &s).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FieldsTest, ParseEnumListsTheChoices) {
  EXPECT_EQ(*ParseEnum<Color>("color", "red", kColorNames), Color::kRed);
  const auto bad = ParseEnum<Color>("color", "Red", kColorNames);
  EXPECT_EQ(bad.status().message(), "--color=Red: must be one of red, green");
  EXPECT_EQ(EnumName<Color>(Color::kGreen, kColorNames), "green");
}

}  // namespace
}  // namespace mt
