#include "experiments/gpt2_zeroshot/zeroshot_tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/model_loading.h"
#include "core/file_system.h"
#include "core/status.h"
#include "experiments/common/eval_runs.h"
#include "experiments/common/plot.h"
#include "experiments/common/report.h"
#include "experiments/common/stats.h"
#include "models/count.h"

namespace mt {
namespace experiments {

namespace {

// Paper Table 2 (Shoeybi et al. 2019): WikiText-103 adjusted perplexity, LAMBADA accuracy (%).
struct PaperRow {
  const char* model;
  double params;  // 0: not a model of the paper (the previous state of the art).
  double wikitext_ppl, lambada_pct;
};
constexpr PaperRow kPaper[] = {{"paper 355M", 355e6, 19.31, 45.18},
                               {"paper 2.5B", 2.5e9, 12.76, 61.73},
                               {"paper 8.3B", 8.3e9, 10.81, 66.51},
                               {"previous SOTA (as the paper lists it)", 0, 15.79, 63.24}};
constexpr char kPaperWiki[] = "WikiText-103 test";
constexpr char kPaperLambada[] = "LAMBADA test";

std::string Basename(const std::string& path) {
  const std::string p(absl::StripSuffix(path, "/"));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string Millions(double params) { return absl::StrFormat("%.3f", params / 1e6); }

// wikitext_points.csv / lambada_points.csv: series,params_m,value (series "paper", "d0", ...).
absl::Status WritePlots(const ExperimentRun& run, const ZeroShotReportInputs& in,
                        const std::vector<ModelScores>& scores) {
  Table wiki({"series", "params_m", "adjusted_ppl"}), lam({"series", "params_m", "accuracy_pct"});
  for (const PaperRow& p : kPaper) {
    if (p.params == 0) continue;
    wiki.AddRow({"paper", Millions(p.params), Fixed(p.wikitext_ppl, 2)});
    lam.AddRow({"paper", Millions(p.params), Fixed(p.lambada_pct, 2)});
  }
  for (const ModelScores& m : scores) {
    for (size_t d = 0; d < m.wikitext_adjusted_ppl.size(); ++d) {
      wiki.AddRow({absl::StrCat("d", d), Millions(m.params), Fixed(m.wikitext_adjusted_ppl[d], 3)});
    }
    for (size_t d = 0; d < m.lambada_accuracy.size(); ++d) {
      lam.AddRow({absl::StrCat("d", d), Millions(m.params), Fixed(100 * m.lambada_accuracy[d], 2)});
    }
  }
  RETURN_IF_ERROR(WriteCsv(run.Path("wikitext_points.csv"), wiki));
  RETURN_IF_ERROR(WriteCsv(run.Path("lambada_points.csv"), lam));
  auto plot = [&](const std::string& csv, const std::string& y, const std::string& paper,
                  const std::vector<EvalData>& data) {
    Plot p;
    p.xlabel = "parameters (millions, log scale)";
    p.logx = true;
    p.key_below = true;  // The series' names are long.
    p.series.push_back(
        {absl::StrCat("paper (", paper, ")"), csv, "params_m", y, "series", "paper"});
    for (size_t d = 0; d < data.size(); ++d) {
      p.series.push_back({absl::StrCat("ours (", data[d].name, ")"), csv, "params_m", y, "series",
                          absl::StrCat("d", d)});
    }
    return p;
  };
  Plot w = plot("wikitext_points.csv", "adjusted_ppl", kPaperWiki, in.wikitext);
  w.title = "Zero-shot WikiText-103-format perplexity vs model size (paper Table 2)";
  w.ylabel = "adjusted perplexity (per original token, log scale)";
  w.logy = true;
  RETURN_IF_ERROR(DrawPlot(w, run.Path("wikitext_ppl.png")));
  Plot l = plot("lambada_points.csv", "accuracy_pct", kPaperLambada, in.lambada);
  l.title = "Zero-shot LAMBADA-format last-word accuracy vs model size (paper Table 2)";
  l.ylabel = "accuracy (% of examples, strict whole word)";
  l.ymin = 0;
  l.ymax = 100;
  return DrawPlot(l, run.Path("lambada_acc.png"));
}

// The Markdown table: the paper's rows and ours, a column per dataset.
Table WideTable(const ZeroShotReportInputs& in, const std::vector<ModelScores>& scores) {
  std::vector<std::string> header = {"model", "params", absl::StrCat(kPaperWiki, " ppl (adjusted)"),
                                     absl::StrCat(kPaperLambada, " acc %")};
  for (const EvalData& d : in.wikitext) header.push_back(absl::StrCat(d.name, ": ppl (adjusted)"));
  for (const EvalData& d : in.lambada) header.push_back(absl::StrCat(d.name, ": acc %"));
  Table t(header);
  const size_t ours = in.wikitext.size() + in.lambada.size();
  for (const PaperRow& p : kPaper) {
    std::vector<std::string> row = {p.model, p.params > 0 ? Millions(p.params) + "M" : "-",
                                    Fixed(p.wikitext_ppl, 2), Fixed(p.lambada_pct, 2)};
    row.resize(row.size() + ours, "-");
    t.AddRow(row);
  }
  for (const ModelScores& m : scores) {
    std::vector<std::string> row = {absl::StrCat("ours ", m.label), Millions(m.params) + "M", "-",
                                    "-"};
    for (double v : m.wikitext_adjusted_ppl) row.push_back(Fixed(v, 2));
    for (double v : m.lambada_accuracy) row.push_back(Fixed(100 * v, 2));
    t.AddRow(row);
  }
  return t;
}

Table LongTable(const std::vector<ModelScores>& scores, const ZeroShotReportInputs& in) {
  Table t = PaperZeroShotRows();
  for (const ModelScores& m : scores) {
    const std::string params = absl::StrCat(m.params);
    for (size_t d = 0; d < in.wikitext.size(); ++d) {
      t.AddRow({m.label, params, in.wikitext[d].name, "adjusted_ppl",
                Fixed(m.wikitext_adjusted_ppl[d], 4)});
      t.AddRow({m.label, params, in.wikitext[d].name, "ppl", Fixed(m.wikitext_ppl[d], 4)});
    }
    for (size_t d = 0; d < in.lambada.size(); ++d) {
      t.AddRow({m.label, params, in.lambada[d].name, "accuracy_pct",
                Fixed(100 * m.lambada_accuracy[d], 2)});
    }
  }
  return t;
}

// Rows of the held-out LAMBADA-format file's statistics: each model's and the bigram's examples
// and 95% Wilson interval.
void AddIntervalRows(const std::vector<ModelScores>& scores, const ZeroShotReportInputs& in,
                     Table* t) {
  const HeldOutBaseline& b = in.baseline;
  if (b.lambada_index < 0) return;
  const std::string dataset = in.lambada[b.lambada_index].name;
  auto add = [&](const std::string& model, const std::string& params, int64_t k, int64_t n) {
    const Interval ci = WilsonInterval(k, n);
    if (model == "bigram baseline") {
      t->AddRow({model, params, dataset, "accuracy_pct", Fixed(100.0 * k / n, 2)});
    }
    t->AddRow({model, params, dataset, "examples", absl::StrCat(n)});
    t->AddRow({model, params, dataset, "ci95_low_pct", Fixed(100 * ci.low, 2)});
    t->AddRow({model, params, dataset, "ci95_high_pct", Fixed(100 * ci.high, 2)});
  };
  for (const ModelScores& m : scores) {
    const int64_t n = m.lambada_examples[b.lambada_index];
    add(m.label, absl::StrCat(m.params), std::llround(m.lambada_accuracy[b.lambada_index] * n), n);
  }
  add("bigram baseline", "", b.bigram_correct, b.examples);
}

std::string Percent(int64_t k, int64_t n) {
  const Interval ci = WilsonInterval(k, n);
  return absl::StrFormat("%lld / %lld = %.2f%% (95%% Wilson interval %.2f-%.2f%%)",
                         static_cast<long long>(k), static_cast<long long>(n), 100.0 * k / n,
                         100 * ci.low, 100 * ci.high);
}

}  // namespace

std::string ZeroShotFinding(const std::vector<ModelScores>& unsorted, const HeldOutBaseline& b) {
  std::vector<ModelScores> scores = unsorted;
  std::sort(scores.begin(), scores.end(),
            [](const ModelScores& x, const ModelScores& y) { return x.params < y.params; });
  std::string out =
      "**The paper's claim** (Tables 2-3): larger GPT-2 models reach lower WikiText-103 "
      "perplexity and higher LAMBADA accuracy.\n\n";
  bool falls = scores.size() >= 2 && b.wikitext_index >= 0;
  std::string ppl;
  for (const ModelScores& m : scores) {
    if (b.wikitext_index < 0) break;
    const double v = m.wikitext_adjusted_ppl[b.wikitext_index];
    if (&m != &scores.front() && !(v < (&m - 1)->wikitext_adjusted_ppl[b.wikitext_index])) {
      falls = false;
    }
    absl::StrAppend(&ppl, ppl.empty() ? "" : " -> ", m.label, " ", Fixed(v, 1));
  }
  absl::StrAppend(&out, "- **WikiText-format perplexity falls with size: ",
                  scores.size() < 2 ? "one size only, nothing to compare"
                  : falls           ? "supported"
                                    : "not supported",
                  "** (held-out documents, adjusted: ", ppl.empty() ? "not scored" : ppl, ").\n");
  if (b.lambada_index < 0 || scores.empty() || b.examples == 0) {
    absl::StrAppend(&out, "- LAMBADA-format accuracy: no held-out file scored.\n");
    return out;
  }
  const ModelScores& big = scores.back();
  const int64_t n = big.lambada_examples[b.lambada_index];
  const int64_t k = std::llround(big.lambada_accuracy[b.lambada_index] * n);
  const double z = TwoProportionZ(k, n, b.bigram_correct, b.examples);
  // The same lines for both: the paired test where both per-line outcomes are at hand.
  absl::StatusOr<PairedComparison> paired = absl::NotFoundError("no per-line outcomes");
  if (static_cast<size_t>(b.lambada_index) < big.lambada_example_correct.size() &&
      !big.lambada_example_correct[b.lambada_index].empty()) {
    paired = ComparePaired(big.lambada_example_correct[b.lambada_index], b.bigram_example_correct);
    if (!paired.ok()) {
      absl::StrAppend(&out,
                      "- (The per-line outcomes of the model and the bigram differ in "
                      "length, which they must not: ",
                      paired.status().message(), "; compared unpaired below.)\n");
    }
  }
  const double p = paired.ok() ? paired->p : NormalUpperTail(z);
  const bool higher = k * b.examples > b.bigram_correct * n;  // k / n above the bigram's share.
  const bool above = k > 0 && WilsonInterval(k, n).low > 0 && higher && p < 0.05;
  std::string test =
      paired.ok() ? absl::StrFormat(
                        "; on the same %lld lines the model alone is right on %lld and the "
                        "bigram alone on %lld: exact one-sided McNemar test p = %.2g (the "
                        "two-proportion z, which ignores the pairing, is %.2f)",
                        static_cast<long long>(n), static_cast<long long>(paired->only_first),
                        static_cast<long long>(paired->only_second), p, z)
                  : absl::StrFormat("; one-sided two-proportion z = %.2f, p = %.2g", z, p);
  absl::StrAppend(&out, "- **LAMBADA-format accuracy above 0 and above a word-bigram baseline: ",
                  above ? "supported" : "not supported", "**: the largest model, ", big.label, ", ",
                  Percent(k, n),
                  "; the bigram baseline (most frequent next word of the training text), ",
                  Percent(b.bigram_correct, b.examples), test, ".\n");
  for (const ModelScores& m : scores) {
    const int64_t mk = std::llround(m.lambada_accuracy[b.lambada_index] * n);
    absl::StrAppend(&out, "  - ", m.label, ": ", Percent(mk, m.lambada_examples[b.lambada_index]),
                    "\n");
  }
  return out;
}

std::string ModelSize::Label() const {
  return absl::StrCat("gpt2_", layers, "x", hidden, "x", heads);
}

absl::StatusOr<std::vector<ModelSize>> ParseModelSizes(absl::string_view list) {
  std::vector<ModelSize> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(item, 'x');
    ModelSize m;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &m.layers) ||
        !absl::SimpleAtoi(parts[1], &m.hidden) || !absl::SimpleAtoi(parts[2], &m.heads) ||
        m.layers < 1 || m.hidden < 1 || m.heads < 1 || m.hidden % m.heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--models: '", item,
          "' is not LAYERSxHIDDENxHEADS with positive values and heads dividing hidden"));
    }
    out.push_back(m);
  }
  if (out.empty()) return absl::InvalidArgumentError("--models: no model sizes given");
  return out;
}

absl::StatusOr<std::vector<bool>> ExampleOutcomes(const std::string& path, int64_t examples) {
  ASSIGN_OR_RETURN(const std::string text, DefaultFileSystem().ReadFile(path));
  std::vector<bool> correct(static_cast<size_t>(examples), false);
  std::vector<bool> seen(static_cast<size_t>(examples), false);
  int64_t lines = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    ++lines;
    const Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("example") || !j["example"].is_number_integer() ||
        !j.contains("correct") || !j["correct"].is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " line ", lines,
                       ": not an object with an integer \"example\" and a boolean "
                       "\"correct\": '",
                       line, "'"));
    }
    const int64_t i = j["example"].get<int64_t>();
    if (i < 0 || i >= examples || seen[i]) {
      return absl::InvalidArgumentError(absl::StrCat(path, " line ", lines, ": example ", i,
                                                     i < 0 || i >= examples
                                                         ? absl::StrCat(" is not below ", examples)
                                                         : std::string(" again")));
    }
    seen[i] = true;
    correct[i] = j["correct"].get<bool>();
  }
  if (lines != examples) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " has ", lines, " per-example lines for ", examples, " examples"));
  }
  return correct;
}

namespace {

// The lambada harness on each file into `m`; for settings.paired_lambada with its per-example
// lines, read back and checked against its count of right answers.
absl::Status ScoreLambada(const ScoringSettings& s, const std::vector<std::string>& common,
                          const std::vector<EvalData>& lambada, const std::string& label,
                          ModelScores* m) {
  for (size_t f = 0; f < lambada.size(); ++f) {
    const bool paired = static_cast<int>(f) == s.paired_lambada;
    const std::string lines = absl::StrCat(s.example_dir, "/", label, ".lambada.jsonl");
    std::vector<std::string> argv = {s.lambada_bin, "--data=" + lambada[f].path};
    if (paired) argv.push_back("--per_example_jsonl=" + lines);
    argv.insert(argv.end(), common.begin(), common.end());
    ASSIGN_OR_RETURN(Json r, RunForJson(s.launcher, argv));
    ASSIGN_OR_RETURN(double accuracy, NumberAt(r, {"accuracy"}, "lambada"));
    ASSIGN_OR_RETURN(double examples, NumberAt(r, {"examples"}, "lambada"));
    m->lambada_accuracy.push_back(accuracy);
    m->lambada_examples.push_back(static_cast<int64_t>(examples));
    m->lambada_example_correct.emplace_back();
    if (!paired) continue;
    ASSIGN_OR_RETURN(std::vector<bool> outcomes,
                     ExampleOutcomes(lines, static_cast<int64_t>(examples)));
    const int64_t right = std::count(outcomes.begin(), outcomes.end(), true);
    if (right != std::llround(accuracy * examples)) {
      return absl::InternalError(absl::StrCat(lines, " counts ", right,
                                              " right answers; lambada "
                                              "reported accuracy ",
                                              accuracy, " of ", examples));
    }
    m->lambada_example_correct.back() = std::move(outcomes);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelScores> ScoreCheckpoint(const ScoringSettings& s, const std::string& checkpoint,
                                            const std::vector<EvalData>& wikitext,
                                            const std::vector<EvalData>& lambada) {
  ASSIGN_OR_RETURN(checkpoint::CheckpointModel ckpt, checkpoint::ReadCheckpointModel(checkpoint));
  ASSIGN_OR_RETURN(models::ParameterCount count, models::CountParameters(ckpt.config, 1));
  ModelScores m;
  m.label = Basename(checkpoint);
  m.model = ckpt.model_name;
  m.params = count.total;
  m.shape = absl::StrFormat("%d layers, hidden %lld, %d heads", ckpt.config.num_layers,
                            static_cast<long long>(ckpt.config.hidden_size),
                            ckpt.config.num_attention_heads);
  const std::vector<std::string> common = {"--load=" + checkpoint,
                                           absl::StrCat("--device=", DeviceTypeName(s.device))};
  for (const EvalData& d : wikitext) {
    std::vector<std::string> argv = {s.wikitext_bin, "--data=" + d.path,
                                     absl::StrCat("--overlapping_eval=", s.overlapping_eval)};
    argv.insert(argv.end(), common.begin(), common.end());
    ASSIGN_OR_RETURN(Json r, RunForJson(s.launcher, argv));
    ASSIGN_OR_RETURN(double adjusted, NumberAt(r, {"adjusted_ppl"}, "wikitext103"));
    ASSIGN_OR_RETURN(double ppl, NumberAt(r, {"ppl"}, "wikitext103"));
    m.wikitext_adjusted_ppl.push_back(adjusted);
    m.wikitext_ppl.push_back(ppl);
  }
  RETURN_IF_ERROR(ScoreLambada(s, common, lambada, m.label, &m));
  return m;
}

Table PaperZeroShotRows() {
  Table t({"model", "params", "dataset", "metric", "value"});
  for (const PaperRow& p : kPaper) {
    const std::string params = p.params > 0 ? absl::StrFormat("%.0f", p.params) : "";
    t.AddRow({p.model, params, kPaperWiki, "adjusted_ppl", Fixed(p.wikitext_ppl, 2)});
    t.AddRow({p.model, params, kPaperLambada, "accuracy_pct", Fixed(p.lambada_pct, 2)});
  }
  return t;
}

absl::Status WriteZeroShotResults(const ExperimentRun& run, const ZeroShotReportInputs& in,
                                  const std::vector<ModelScores>& scores) {
  Table csv = LongTable(scores, in);
  AddIntervalRows(scores, in, &csv);
  RETURN_IF_ERROR(WriteCsv(run.Path("zeroshot.csv"), csv));
  RETURN_IF_ERROR(WritePlots(run, in, scores));
  Report report("Tables 2-3: GPT-2 zero-shot WikiText-103 perplexity and LAMBADA accuracy");
  report.Paragraph(ZeroShotFinding(scores, in.baseline));
  report.Paragraph(
      "The paper's rows (Table 2; model shapes in Table 3) beside ours. Ours are scored with the "
      "same protocols (`eval/wikitext103`: detokenised text, windows of the model's sequence "
      "length every `--overlapping_eval` tokens, perplexity per original whitespace token; "
      "`eval/lambada`: strict whole-word, teacher-forced argmax) but NOT on the paper's data or "
      "at its scale, so the numbers are not comparable with the paper's: see the data below.");
  report.AddTable(WideTable(in, scores));
  report.Heading("What our numbers used");
  std::string data = absl::StrCat(
      "- models: ",
      in.trained_here
          ? absl::StrFormat(
                "trained here on %s (%lld steps of %lld sequences of %lld tokens "
                "each, %.2fM tokens seen in all vs the paper's 157B; peak learning rate %g, "
                "dropout %g), the held-out documents unseen",
                in.data_name, static_cast<long long>(in.train_iters),
                static_cast<long long>(in.global_batch_size), static_cast<long long>(in.seq_length),
                1e-6 * static_cast<double>(in.train_iters * in.global_batch_size * in.seq_length),
                in.lr, in.dropout)
          : "the checkpoints given with --load",
      "\n");
  for (const EvalData& d : in.wikitext)
    absl::StrAppend(&data, "- WikiText-format: ", d.name, " (`", d.path, "`)\n");
  for (const EvalData& d : in.lambada)
    absl::StrAppend(&data, "- LAMBADA-format: ", d.name, " (`", d.path, "`)\n");
  absl::StrAppend(
      &data,
      "\nThe held-out documents are documents of the corpus that training did not "
      "use ",
      in.heldout_screened ? "and that share no 13-word run with the training text"
                          : "(the test split of the data; not screened for text shared with the "
                            "training split)",
      ", written as WikiText's tokenised format (one document per paragraph, no headings) and as "
      "LAMBADA lines, ",
      in.lambada_copy_targets
          ? "LAMBADA's design as a rule on the text alone, applied before any model "
            "was scored and the same for every model and the baseline (LAMBADA kept "
            "passages whose last word follows from the wider context): per document "
            "its longest beginning of 10 or more words that fits the model's context "
            "and ends with a sentence's last word that also occurs earlier in it "
            "(trailing punctuation removed; documents without one give no line). "
          : "the last word of each document of 10 or more words that fits the "
            "model's context, trailing punctuation removed. ",
      "The bigram baseline predicts "
      "each line's last word as the word that most often follows the one before it "
      "in the training text. They are not WikiText-103 or LAMBADA.");
  report.Paragraph(data);
  Table models({"model", "registered name", "shape", "params", "training wall time (s)"});
  for (const ModelScores& m : scores) {
    models.AddRow({m.label, m.model, m.shape, absl::StrCat(m.params),
                   m.train_seconds < 0 ? "-" : Fixed(m.train_seconds, 1)});
  }
  report.AddTable(models);
  report.Image("wikitext_ppl.png", "adjusted perplexity against parameters, paper and ours");
  report.Image("lambada_acc.png", "LAMBADA accuracy against parameters, paper and ours");
  report.Paragraph(
      "At paper scale: `--load=` the trained checkpoints (any TP degree), "
      "`--wikitext=wikitext-103/wiki.test.tokens --lambada=lambada_test.jsonl`, "
      "`--device=cuda --launcher='mpirun -np 8'`.");
  return report.Write(run);
}

}  // namespace experiments
}  // namespace mt
