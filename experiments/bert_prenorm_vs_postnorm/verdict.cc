#include "experiments/bert_prenorm_vs_postnorm/verdict.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

namespace mt {
namespace experiments {
namespace {

const char* NormName(bool pre) { return pre ? "pre" : "post"; }

// "7.123 ± 0.045" (or "diverged" when the mean is not finite).
std::string MeanSd(const Spread& s) {
  if (!std::isfinite(s.mean)) return "non-finite";
  return absl::StrFormat("%.3f ± %.3f", s.mean, s.stddev);
}

// Per iteration, the mean and sample sd over the seeds of one group of their curves smoothed by a
// trailing moving average over `smooth` points.
void MeanBand(const std::vector<const NormRun*>& group, int smooth, std::vector<double>* mean,
              std::vector<double>* sd) {
  const size_t n = group[0]->curve.size();
  std::vector<std::vector<double>> smoothed;
  for (const NormRun* r : group) {
    CHECK_EQ(r->curve.size(), n) << "seeds of one group logged different iterations";
    std::vector<double> losses;
    for (const LossPoint& p : r->curve) losses.push_back(p.loss);
    smoothed.push_back(MovingAverage(losses, smooth));
  }
  mean->assign(n, 0.0);
  sd->assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> at;
    for (const auto& c : smoothed) at.push_back(c[i]);
    const Spread s = Summarize(at);
    (*mean)[i] = s.mean;
    (*sd)[i] = s.stddev;
  }
}

// Adds one (width, depth, norm) group's rows to the per-run tables and returns its summary.
NormFinal AddGroup(const std::vector<const NormRun*>& group, int window, int smooth,
                   NormTables* t) {
  NormFinal f;
  f.depth = group[0]->depth;
  f.pre = group[0]->pre;
  f.hidden = group[0]->hidden;
  const std::string depth = absl::StrCat(f.depth), norm = NormName(f.pre),
                    hidden = absl::StrCat(f.hidden);
  std::vector<double> finals;
  for (const NormRun* r : group) {
    for (const LossPoint& p : r->curve) {
      t->curves.AddRow({absl::StrCat(p.iteration), depth, norm, absl::StrCat(r->seed),
                        absl::StrFormat("%.6g", p.loss), hidden});
    }
    const double final_loss = TailMean(r->curve, window);
    const Outcome o = Classify(r->curve, window, kMinDrop);
    f.diverged += o == Outcome::kDiverged;
    f.stalled += o == Outcome::kStalled;
    f.learned += o == Outcome::kLearned;
    f.seconds += r->seconds;
    finals.push_back(final_loss);
    f.by_seed[r->seed] = final_loss;
    t->per_seed.AddRow({depth, norm, absl::StrCat(r->seed), absl::StrFormat("%.6g", final_loss),
                        OutcomeName(o), hidden, absl::StrCat(norm, "_h", hidden)});
  }
  f.final = Summarize(finals);
  std::vector<double> mean, sd;
  MeanBand(group, smooth, &mean, &sd);
  std::vector<double> raw(mean.size(), 0.0);
  for (const NormRun* r : group) {
    for (size_t i = 0; i < raw.size(); ++i) raw[i] += r->curve[i].loss / group.size();
  }
  for (size_t i = 0; i < mean.size(); ++i) {
    t->mean_curves.AddRow({absl::StrCat(norm, "_", depth, "_h", hidden), depth, norm,
                           absl::StrCat(group[0]->curve[i].iteration),
                           absl::StrFormat("%.6g", raw[i]), absl::StrFormat("%.6g", mean[i]),
                           absl::StrFormat("%.6g", mean[i] - sd[i]),
                           absl::StrFormat("%.6g", mean[i] + sd[i]), hidden});
  }
  t->final_table.AddRow(
      {hidden, depth, absl::StrCat(norm, "-norm"), MeanSd(f.final),
       Fixed(StandardError(f.final), 3), absl::StrFormat("%.3f – %.3f", f.final.min, f.final.max),
       absl::StrFormat("%d learned, %d stalled, %d diverged", f.learned, f.stalled, f.diverged),
       Fixed(f.seconds, 0)});
  return f;
}

// The gaps post - pre of `t.finals`, per width in order of appearance, by increasing depth.
void AddGaps(NormTables* t) {
  std::vector<int64_t> widths;
  std::map<std::pair<int64_t, int64_t>, std::pair<const NormFinal*, const NormFinal*>> by;
  for (const NormFinal& f : t->finals) {
    if (std::find(widths.begin(), widths.end(), f.hidden) == widths.end())
      widths.push_back(f.hidden);
    auto& pair = by[{f.hidden, f.depth}];
    (f.pre ? pair.second : pair.first) = &f;
  }
  for (int64_t w : widths) {
    for (const auto& [key, pair] : by) {
      if (key.first != w || pair.first == nullptr || pair.second == nullptr) continue;
      const NormGap g = Compare(*pair.first, *pair.second);
      t->gaps.push_back(g);
      t->gaps_csv.AddRow({absl::StrCat(w), absl::StrCat(g.depth), absl::StrFormat("%.6g", g.gap),
                          absl::StrFormat("%.6g", g.se), absl::StrFormat("%.4g", g.z),
                          absl::StrCat(g.pairs), absl::StrFormat("%.6g", g.paired_se),
                          absl::StrFormat("%.4g", g.paired_z)});
      t->gap_table.AddRow({absl::StrCat(w), absl::StrCat(g.depth), absl::StrFormat("%+.3f", g.gap),
                           Fixed(g.se, 3), absl::StrFormat("%+.1f", g.z), Fixed(g.paired_se, 3),
                           absl::StrFormat("%+.1f", g.paired_z)});
    }
  }
}

// The widths of `gaps`, in order of appearance.
std::vector<int64_t> Widths(const std::vector<NormGap>& gaps) {
  std::vector<int64_t> widths;
  for (const NormGap& g : gaps) {
    if (std::find(widths.begin(), widths.end(), g.hidden) == widths.end())
      widths.push_back(g.hidden);
  }
  return widths;
}

// The gaps of one width, by depth.
std::vector<NormGap> GapsOf(const std::vector<NormGap>& gaps, int64_t hidden) {
  std::vector<NormGap> out;
  for (const NormGap& g : gaps) {
    if (g.hidden == hidden) out.push_back(g);
  }
  return out;
}

// A group's summary by (width, depth, norm); nullptr when absent.
const NormFinal* Find(const std::vector<NormFinal>& finals, int64_t hidden, int64_t depth,
                      bool pre) {
  for (const NormFinal& f : finals) {
    if (f.hidden == hidden && f.depth == depth && f.pre == pre) return &f;
  }
  return nullptr;
}

// One width's sentences: the gap at each depth, each norm's trend, and whether it shows the
// finding.
std::string WidthFinding(const NormTables& t, const std::vector<NormGap>& gaps, bool shows) {
  const int64_t w = gaps.front().hidden;
  std::string out = absl::StrFormat("Hidden %d: ", w);
  for (const NormGap& g : gaps) {
    const NormFinal* post = Find(t.finals, w, g.depth, false);
    const NormFinal* pre = Find(t.finals, w, g.depth, true);
    absl::StrAppendFormat(
        &out,
        "at %d layers post-norm %s, pre-norm %s, gap %+.3f ± %.3f (%+.1f SE; paired by seed "
        "%+.1f SE; %s)%s; ",
        g.depth, MeanSd(post->final), MeanSd(pre->final), g.gap, g.se, g.z, g.paired_z,
        Separated(post->final, pre->final)   ? "every post-norm seed above every pre-norm seed"
        : Separated(pre->final, post->final) ? "every pre-norm seed above every post-norm seed"
                                             : "the seeds' ranges overlap",
        post->diverged + pre->diverged > 0
            ? absl::StrFormat(", diverged runs: %d post-norm, %d pre-norm", post->diverged,
                              pre->diverged)
            : "");
  }
  const int64_t shallow = gaps.front().depth, deep = gaps.back().depth;
  const auto trend = [&](bool pre) {
    const double a = Find(t.finals, w, shallow, pre)->final.mean;
    const double b = Find(t.finals, w, deep, pre)->final.mean;
    return absl::StrFormat("%s-norm %.3f -> %.3f (%s)", NormName(pre), a, b,
                           b < a ? "better with depth" : "worse with depth");
  };
  absl::StrAppendFormat(&out, "from %d to %d layers %s, %s. %s", shallow, deep, trend(false),
                        trend(true),
                        shows ? "Post-norm falls behind pre-norm as depth grows: the gap grows "
                                "and exceeds 3 standard errors at the deepest setting."
                              : "This width does not show the finding (gap at the deepest "
                                "setting within 3 standard errors, or not growing with depth).");
  return out;
}

}  // namespace

double StandardError(const Spread& s) {
  if (s.n < 2 || !std::isfinite(s.stddev)) return std::numeric_limits<double>::quiet_NaN();
  return s.stddev / std::sqrt(static_cast<double>(s.n));
}

NormGap Compare(const NormFinal& post, const NormFinal& pre) {
  NormGap g;
  g.hidden = post.hidden;
  g.depth = post.depth;
  g.gap = post.final.mean - pre.final.mean;
  const double a = StandardError(post.final), b = StandardError(pre.final);
  g.se = std::sqrt(a * a + b * b);
  g.z = g.gap / g.se;
  std::vector<double> diffs;
  for (const auto& [seed, loss] : post.by_seed) {
    const auto it = pre.by_seed.find(seed);
    if (it != pre.by_seed.end()) diffs.push_back(loss - it->second);
  }
  g.pairs = static_cast<int>(diffs.size());
  const Spread d = Summarize(diffs);
  g.paired_se = StandardError(d);
  g.paired_z = d.mean / g.paired_se;
  return g;
}

NormTables MakeNormTables(const std::vector<NormRun>& runs, int window, int smooth) {
  std::vector<std::tuple<int64_t, int64_t, bool>> order;
  std::map<std::tuple<int64_t, int64_t, bool>, std::vector<const NormRun*>> groups;
  for (const NormRun& r : runs) {
    const auto key = std::make_tuple(r.hidden, r.depth, r.pre);
    if (groups[key].empty()) order.push_back(key);
    groups[key].push_back(&r);
  }
  NormTables t;
  for (const auto& key : order) t.finals.push_back(AddGroup(groups[key], window, smooth, &t));
  // Each (width, norm)'s rows contiguous, so its plotted line is not broken by other rows.
  std::vector<int64_t> widths;
  for (const NormFinal& f : t.finals) {
    if (std::find(widths.begin(), widths.end(), f.hidden) == widths.end())
      widths.push_back(f.hidden);
  }
  for (int64_t w : widths) {
    for (bool pre : {false, true}) {
      for (const NormFinal& f : t.finals) {
        if (f.pre != pre || f.hidden != w) continue;
        const double se = StandardError(f.final);
        t.final_csv.AddRow(
            {absl::StrCat(f.depth), NormName(f.pre), absl::StrCat(f.final.n),
             absl::StrFormat("%.6g", f.final.mean), absl::StrFormat("%.6g", f.final.stddev),
             absl::StrFormat("%.6g", f.final.min), absl::StrFormat("%.6g", f.final.max),
             absl::StrCat(f.diverged), absl::StrCat(f.stalled), absl::StrCat(f.learned),
             absl::StrCat(f.hidden), absl::StrFormat("%.6g", se),
             absl::StrFormat("%.6g", f.final.mean - f.final.stddev),
             absl::StrFormat("%.6g", f.final.mean + f.final.stddev),
             absl::StrCat(NormName(f.pre), "_h", f.hidden)});
      }
    }
  }
  AddGaps(&t);
  return t;
}

bool ShowsFinding(const std::vector<NormGap>& gaps, double min_z) {
  if (gaps.size() < 2) return false;
  const NormGap& deep = gaps.back();
  return deep.z > min_z && deep.paired_z > min_z && deep.gap > gaps.front().gap;
}

Verdict Judge(const NormTables& t, double min_z) {
  Verdict v;
  for (int64_t w : Widths(t.gaps)) {
    const std::vector<NormGap> gaps = GapsOf(t.gaps, w);
    if (gaps.size() < 2) continue;
    ++v.measured;
    v.shown += ShowsFinding(gaps, min_z);
  }
  return v;
}

std::string Finding(const NormTables& t, double lr, int64_t warmup_samples) {
  std::string out;
  for (int64_t w : Widths(t.gaps)) {
    const std::vector<NormGap> gaps = GapsOf(t.gaps, w);
    if (gaps.size() < 2) continue;
    absl::StrAppend(&out, WidthFinding(t, gaps, ShowsFinding(gaps, 3.0)), "\n\n");
  }
  const Verdict v = Judge(t, 3.0);
  if (v.measured == 0) {
    return "Fewer than two depths ran with both norms: no trend with depth to state.";
  }
  if (v.supported()) {
    absl::StrAppendFormat(
        &out,
        "**Supported at every width (%d of %d)**: at learning rate %g with %d warmup samples, "
        "post-norm ends above pre-norm at the deepest setting by more than 3 standard errors, "
        "and the gap grows with depth.",
        v.shown, v.measured, lr, warmup_samples);
  } else {
    absl::StrAppendFormat(
        &out,
        "**Not supported at every width (%d of %d show it)**: at learning rate %g with %d warmup "
        "samples, post-norm does not fall behind pre-norm by more than 3 standard errors with a "
        "gap growing with depth everywhere. To look for the regime, keep no warmup, train "
        "longer and go deeper (a higher rate alone does not help while the models have not "
        "left the unigram plateau: docs/experiments.md), e.g. `--num_layers=2,8,16 "
        "--train_iters=1000 --lr_warmup_samples=0`.",
        v.shown, v.measured, lr, warmup_samples);
  }
  return out;
}

}  // namespace experiments
}  // namespace mt
