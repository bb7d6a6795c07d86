#include "experiments/gpt2_zeroshot/zeroshot_tables.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(ParseModelSizesTest, ParsesAndChecks) {
  auto s = ParseModelSizes("2x64x4,,4x128x8");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1].layers, 4);
  EXPECT_EQ((*s)[1].hidden, 128);
  EXPECT_EQ((*s)[1].heads, 8);
  EXPECT_EQ((*s)[0].Label(), "gpt2_2x64x4");
  for (const char* bad : {"", "2x64", "2x65x4", "0x64x4", "2x64x4x1", "axbxc"}) {
    EXPECT_EQ(ParseModelSizes(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(PaperZeroShotRowsTest, Table2) {
  const Table t = PaperZeroShotRows();
  EXPECT_EQ(t.ToCsv().substr(0, t.ToCsv().find('\n')), "model,params,dataset,metric,value");
  ASSERT_EQ(t.rows().size(), 8u);
  EXPECT_EQ(t.rows()[0], (std::vector<std::string>{"paper 355M", "355000000", "WikiText-103 test",
                                                   "adjusted_ppl", "19.31"}));
  EXPECT_EQ(t.rows()[5], (std::vector<std::string>{"paper 8.3B", "8300000000", "LAMBADA test",
                                                   "accuracy_pct", "66.51"}));
  EXPECT_EQ(t.rows()[7][1], "");
  EXPECT_EQ(t.rows()[7][4], "63.24");
}

ModelScores Scores(const std::string& label, int64_t params, double ppl, double accuracy) {
  ModelScores m;
  m.label = label;
  m.params = params;
  m.wikitext_adjusted_ppl = {ppl};
  m.wikitext_ppl = {ppl};
  m.lambada_accuracy = {accuracy};
  m.lambada_examples = {400};
  return m;
}

TEST(ZeroShotFindingTest, SupportedOnlyWhenTheNumbersSaySo) {
  HeldOutBaseline b{0, 0, 400, 20};  // Bigram: 20 / 400 = 5%.
  // Given out of order; the larger model is better on both.
  const std::string yes =
      ZeroShotFinding({Scores("big", 200, 150.0, 0.10), Scores("small", 100, 300.0, 0.06)}, b);
  EXPECT_NE(yes.find("falls with size: supported"), std::string::npos) << yes;
  EXPECT_NE(yes.find("small 300.0 -> big 150.0"), std::string::npos) << yes;
  // 40 / 400 vs 20 / 400: z = 0.05 / sqrt(0.075 * 0.925 * 2 / 400) = 2.6846.
  EXPECT_NE(yes.find("bigram baseline: supported"), std::string::npos) << yes;
  EXPECT_NE(yes.find("40 / 400 = 10.00%"), std::string::npos) << yes;
  EXPECT_NE(yes.find("z = 2.68"), std::string::npos) << yes;
  // The larger model is worse on perplexity, and only 6% on LAMBADA: not significant.
  const std::string no =
      ZeroShotFinding({Scores("small", 100, 300.0, 0.10), Scores("big", 200, 310.0, 0.06)}, b);
  EXPECT_NE(no.find("falls with size: not supported"), std::string::npos) << no;
  EXPECT_NE(no.find("bigram baseline: not supported"), std::string::npos) << no;
  const std::string one = ZeroShotFinding({Scores("small", 100, 300.0, 0.10)}, b);
  EXPECT_NE(one.find("falls with size: one size only"), std::string::npos) << one;
}

// Paired outcomes (the same lines for the model and the bigram): the exact McNemar test, which
// can call a difference significant that the unpaired z test cannot; without matching per-line
// outcomes the report falls back to the z test.
TEST(ZeroShotFindingTest, PairedLinesUseTheExactMcNemarTest) {
  HeldOutBaseline b{0, 0, 400, 20};
  b.bigram_example_correct.assign(400, false);
  for (int i = 0; i < 20; ++i) b.bigram_example_correct[i] = true;  // Lines 0-19.
  ModelScores big = Scores("big", 200, 150.0, 28.0 / 400);
  big.lambada_example_correct.assign(1, std::vector<bool>(400, false));
  for (int i = 4; i < 32; ++i) big.lambada_example_correct[0][i] = true;  // Lines 4-31.
  // Discordant: the model alone on 20-31 (12), the bigram alone on 0-3 (4). P(X >= 12) for
  // X ~ Binomial(16, 1/2) = (1820 + 560 + 120 + 16 + 1) / 65536 = 0.03841. Unpaired, 28 vs 20
  // of 400: z = 0.02 / sqrt(0.06 * 0.94 * 2 / 400) = 1.191, p = 0.117.
  const std::string paired = ZeroShotFinding({big, Scores("small", 100, 300.0, 0.06)}, b);
  EXPECT_NE(paired.find("bigram baseline: supported"), std::string::npos) << paired;
  EXPECT_NE(paired.find("the model alone is right on 12 and the bigram alone on 4"),
            std::string::npos)
      << paired;
  EXPECT_NE(paired.find("McNemar test p = 0.038"), std::string::npos) << paired;
  EXPECT_NE(paired.find("ignores the pairing, is 1.19"), std::string::npos) << paired;
  // Without the model's per-line outcomes: the unpaired z test.
  ModelScores counts_only = big;
  counts_only.lambada_example_correct[0].clear();
  const std::string unpaired = ZeroShotFinding({counts_only}, b);
  EXPECT_NE(unpaired.find("bigram baseline: not supported"), std::string::npos) << unpaired;
  EXPECT_NE(unpaired.find("two-proportion z = 1.19, p = 0.12"), std::string::npos) << unpaired;
  EXPECT_EQ(unpaired.find("McNemar"), std::string::npos) << unpaired;
  EXPECT_EQ(unpaired.find("differ in length"), std::string::npos) << unpaired;
  // Outcomes of different lengths are not the same lines: said, and compared unpaired.
  b.bigram_example_correct.resize(399);
  const std::string mismatched = ZeroShotFinding({big}, b);
  EXPECT_NE(mismatched.find("differ in length, which they must not: ComparePaired: 400 against "
                            "399 outcomes"),
            std::string::npos)
      << mismatched;
  EXPECT_NE(mismatched.find("two-proportion z = 1.19, p = 0.12"), std::string::npos) << mismatched;
}

// The harness's per-example lines read back: in any order, each example once; anything else is
// an error naming the line.
TEST(ExampleOutcomesTest, ReadsEachExampleOnceAndRefusesTheRest) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/outcomes";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string good =
      write("good.jsonl",
            "{\"example\": 2, \"correct\": true, \"target\": [5]}\n"
            "{\"example\": 0, \"correct\": false}\n{\"example\": 1, \"correct\": true}\n");
  auto read = ExampleOutcomes(good, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, (std::vector<bool>{false, true, true}));
  auto refused = [&](const std::string& text, int64_t n, const std::string& says) {
    const absl::StatusOr<std::vector<bool>> r = ExampleOutcomes(write("bad.jsonl", text), n);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status();
  };
  refused("{\"example\": 0, \"correct\": true}\n{\"example\": 0, \"correct\": true}\n", 2,
          "line 2: example 0 again");
  refused("{\"example\": 3, \"correct\": true}\n", 1, "line 1: example 3 is not below 1");
  refused("{\"example\": 0, \"correct\": 1}\n", 1, "line 1: not an object");
  refused("not json\n", 1, "line 1: not an object");
  refused("{\"example\": 0, \"correct\": true}\n", 2, "1 per-example lines for 2 examples");
  EXPECT_EQ(ExampleOutcomes(dir + "/missing.jsonl", 1).status().code(),
            absl::StatusCode::kNotFound);
}

// The report says the held-out documents were screened against the training text only when
// they were (the prose corpus's), not for --data_path's test split.
TEST(WriteZeroShotResultsTest, ReportSaysWhetherTheHeldOutTextWasScreened) {
  for (const bool screened : {true, false}) {
    ExperimentRun run;
    run.name = "gpt2_zeroshot";
    run.results_dir = std::string(std::getenv("TEST_TMPDIR")) + (screened ? "/s" : "/u");
    std::filesystem::create_directories(run.results_dir);
    run.started = std::chrono::system_clock::now();
    run.started_steady = std::chrono::steady_clock::now();
    ZeroShotReportInputs in;
    in.data_name = "a corpus";
    in.train_iters = 10;
    in.global_batch_size = 2;
    in.seq_length = 16;
    in.lr = 2e-3;
    in.dropout = 0;
    in.wikitext = {{"w.tokens", "held-out documents"}};
    in.lambada = {{"l.jsonl", "held-out documents"}};
    in.baseline = {0, 0, 400, 20};
    in.heldout_screened = screened;
    ASSERT_TRUE(WriteZeroShotResults(
                    run, in, {Scores("small", 100, 300.0, 0.06), Scores("big", 200, 150.0, 0.10)})
                    .ok());
    std::ifstream f(run.Path("report.md"));
    std::stringstream text;
    text << f.rdbuf();
    const std::string report = text.str();
    EXPECT_EQ(report.find("share no 13-word run") != std::string::npos, screened) << report;
    EXPECT_EQ(report.find("not screened") != std::string::npos, !screened) << report;
    EXPECT_NE(report.find("10 steps of 2 sequences of 16 tokens each, 0.00M tokens seen in all "
                          "vs the paper's 157B; peak learning rate 0.002, dropout 0)"),
              std::string::npos)
        << report;
  }
}

}  // namespace
}  // namespace experiments
}  // namespace mt
