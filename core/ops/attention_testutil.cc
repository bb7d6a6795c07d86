#include "core/ops/attention_testutil.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "core/philox.h"
#include "gtest/gtest.h"

namespace mt {
namespace testing {
namespace {

const double kU32 = UnitRoundoff(DType::kF32);

// What dropout multiplies probability element `lin` of [B, NH, Tq, Tk] by, from the shared
// Philox draw and key definition.
double DropFactor(const ops::DropoutArgs& a, int64_t lin) {
  if (a.p == 0.0f) return 1.0;
  const float u = PhiloxUniform(a.seed, a.stream, static_cast<uint64_t>(ops::DropoutKey(a, lin)));
  return u >= a.p ? 1.0 / (1.0 - static_cast<double>(a.p)) : 0.0;
}

double MaxAbsRow(const std::vector<double>& x, int64_t row, int64_t D) {
  double m = 0;
  for (int64_t d = 0; d < D; ++d) m = std::max(m, std::fabs(x[row * D + d]));
  return m;
}

// lse within `atol` of the reference, -inf exactly where the reference has it.
::testing::AssertionResult LseClose(const TensorView& got, const std::vector<double>& want,
                                    double atol) {
  const std::vector<double> g = ToDoubles(got);
  for (size_t i = 0; i < g.size(); ++i) {
    const bool inf_ok = (want[i] == -INFINITY) == (g[i] == -INFINITY);
    if (!inf_ok || (want[i] != -INFINITY && !(std::fabs(g[i] - want[i]) <= atol))) {
      return ::testing::AssertionFailure()
             << "lse[" << i << "] = " << g[i] << ", expected " << want[i] << " +- " << atol;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

std::string AttentionDims::Name() const {
  return absl::StrCat("B", B, " NH", NH, G > 0 ? absl::StrCat(" G", G) : "", " Tq", Tq, " Tk", Tk,
                      " D", D);
}

::testing::AssertionResult SameBits(const AttentionResult& a, const AttentionResult& b) {
  const std::pair<const char*, const Tensor AttentionResult::*> members[] = {
      {"out", &AttentionResult::out},
      {"lse", &AttentionResult::lse},
      {"dq", &AttentionResult::dq},
      {"dk", &AttentionResult::dk},
      {"dv", &AttentionResult::dv}};
  for (const auto& [name, member] : members) {
    ::testing::AssertionResult same = SameBits(a.*member, b.*member);
    if (!same) return same << " (" << name << ")";
  }
  return ::testing::AssertionSuccess();
}

AttentionInputs RandomAttentionInputs(const AttentionDims& d, DType dtype, uint64_t seed) {
  return {RandomTensor(d.QShape(), dtype, seed, -1.5, 1.5),
          RandomTensor(d.KShape(), dtype, seed + 1, -1.5, 1.5),
          RandomTensor(d.KShape(), dtype, seed + 2), RandomTensor(d.QShape(), dtype, seed + 3)};
}

Tensor RandomPaddingMask(int64_t B, int64_t Tk, uint64_t seed) {
  Tensor m = RandomInts({B, Tk}, DType::kI32, seed, 0, 3);
  int32_t* p = m.data_as<int32_t>();
  if (B > 0 && Tk > 0) p[0] = 1;
  if (B > 1) std::fill(p + (B - 1) * Tk, p + B * Tk, 0);
  return m;
}

ops::AttentionArgs MakeAttentionArgs(const AttentionDims& d, bool causal,
                                     const TensorView* padding_mask, float p) {
  ops::AttentionArgs a;
  a.scale = 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(d.D, 1)));
  a.causal = causal ? ops::CausalMask::kYes : ops::CausalMask::kNo;
  a.padding_mask = padding_mask;
  a.dropout.p = p;
  a.dropout.seed = 0x1234567890ull;
  a.dropout.stream = 7;
  a.dropout.key_inner = d.NH * d.Tq * d.Tk;
  a.dropout.key_outer_stride = 3 * a.dropout.key_inner;
  a.dropout.key_base = 5 * a.dropout.key_outer_stride + a.dropout.key_inner;
  return a;
}

namespace {

// AttentionReference, one query row at a time: Scores, then Forward (probabilities, out, lse),
// then Backward (this row's terms of dq, dk and dv), each with the magnitudes that bound it.
class ReferenceRows {
 public:
  ReferenceRows(const AttentionDims& dm, const ops::AttentionArgs& args,
                const std::vector<double>& q, const std::vector<double>& k,
                const std::vector<double>& v, const std::vector<double>& dout)
      : dm_(dm),
        args_(args),
        causal_(args.causal == ops::CausalMask::kYes),
        q_(q),
        k_(k),
        v_(v),
        dout_(dout),
        dk_mag_(dm.B * dm.Groups() * dm.Tk, 0.0),
        dv_mag_(dm.B * dm.Groups() * dm.Tk, 0.0),
        s_(dm.Tk),
        prob_(dm.Tk),
        f_(dm.Tk),
        dp_(dm.Tk) {
    if (args.padding_mask != nullptr) mask_ = ToDoubles(*args.padding_mask);
    const int64_t rows = dm.B * dm.NH * dm.Tq, keys = dm.B * dm.Groups() * dm.Tk;
    r_.out.assign(q.size(), 0.0);
    r_.lse.assign(rows, -INFINITY);
    r_.dq.assign(q.size(), 0.0);
    r_.dk.assign(k.size(), 0.0);
    r_.dv.assign(v.size(), 0.0);
    r_.out_zero.assign(rows, true);
    r_.dq_zero.assign(rows, true);
    r_.dk_zero.assign(keys, true);
    r_.dv_zero.assign(keys, true);
  }

  void Row(int64_t bh, int64_t i) {
    const double m = Scores(bh, i);
    if (m == -INFINITY) return;  // Nothing visible: zero row, lse -inf, no gradient.
    Forward(bh, i, m);
    Backward(bh, i);
  }

  AttentionRef Finish() {
    for (double x : dk_mag_) r_.dk_mag = std::max(r_.dk_mag, x);
    for (double x : dv_mag_) r_.dv_mag = std::max(r_.dv_mag, x);
    r_.prob_err = (dm_.D + dm_.Tk + 8) * kU32 * (2.0 + 2.0 * s_max_ + lse_max_);
    return std::move(r_);
  }

 private:
  bool Visible(int64_t bh, int64_t i, int64_t j) const {
    const int64_t b = bh / dm_.NH;
    return (!causal_ || j <= i + (dm_.Tk - dm_.Tq)) &&
           (mask_.empty() || mask_[b * dm_.Tk + j] != 0);
  }

  // The scores s_j of row i of head bh; returns their visible maximum (-inf if none is visible).
  double Scores(int64_t bh, int64_t i) {
    const int64_t qi = bh * dm_.Tq + i, D = dm_.D, kv = dm_.KvHead(bh);
    double m = -INFINITY;
    for (int64_t j = 0; j < dm_.Tk; ++j) {
      double dot = 0, dot_abs = 0;
      for (int64_t d = 0; d < D; ++d) {
        dot += q_[qi * D + d] * k_[(kv * dm_.Tk + j) * D + d];
        dot_abs += std::fabs(q_[qi * D + d] * k_[(kv * dm_.Tk + j) * D + d]);
      }
      s_[j] = args_.scale * dot;
      if (Visible(bh, i, j)) {
        m = std::max(m, s_[j]);
        s_max_ = std::max(s_max_, args_.scale * dot_abs);
      }
    }
    return m;
  }

  // The softmax of the scores (maximum m), the dropout factors, out and lse of the row.
  void Forward(int64_t bh, int64_t i, double m) {
    const int64_t qi = bh * dm_.Tq + i, Tk = dm_.Tk, D = dm_.D, kv = dm_.KvHead(bh);
    double l = 0;
    for (int64_t j = 0; j < Tk; ++j) l += Visible(bh, i, j) ? std::exp(s_[j] - m) : 0.0;
    r_.lse[qi] = m + std::log(l);
    r_.dq_zero[qi] = false;
    lse_max_ = std::max(lse_max_, std::fabs(r_.lse[qi]));
    double out_mag = 0;
    for (int64_t j = 0; j < Tk; ++j) {
      prob_[j] = Visible(bh, i, j) ? std::exp(s_[j] - m) / l : 0.0;
      f_[j] = DropFactor(args_.dropout, qi * Tk + j);
      for (int64_t d = 0; d < D; ++d) {
        r_.out[qi * D + d] += prob_[j] * f_[j] * v_[(kv * Tk + j) * D + d];
      }
      out_mag += prob_[j] * f_[j] * MaxAbsRow(v_, kv * Tk + j, D);
      if (prob_[j] * f_[j] != 0.0) r_.out_zero[qi] = r_.dv_zero[kv * Tk + j] = false;
      if (prob_[j] != 0.0) r_.dk_zero[kv * Tk + j] = false;
    }
    r_.out_mag = std::max(r_.out_mag, out_mag);
  }

  // Backward of out_i = sum_j P_j f_j v_j, P = softmax(s).
  void Backward(int64_t bh, int64_t i) {
    const int64_t qi = bh * dm_.Tq + i, Tk = dm_.Tk, D = dm_.D, kv = dm_.KvHead(bh);
    const double scale = args_.scale;
    double d_i = 0, d_abs = 0;
    for (int64_t j = 0; j < Tk; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += dout_[qi * D + d] * v_[(kv * Tk + j) * D + d];
      dp_[j] = f_[j] * dot;
      d_i += prob_[j] * dp_[j];
      d_abs += prob_[j] * std::fabs(dp_[j]);
    }
    for (int64_t d = 0; d < D; ++d) d_abs += std::fabs(dout_[qi * D + d] * r_.out[qi * D + d]);
    double dq_mag = 0;
    const double q_max = MaxAbsRow(q_, qi, D), dout_max = MaxAbsRow(dout_, qi, D);
    for (int64_t j = 0; j < Tk; ++j) {
      if (prob_[j] == 0.0) continue;
      const int64_t kj = kv * Tk + j;
      const double ds = prob_[j] * (dp_[j] - d_i);
      const double ds_abs = prob_[j] * (std::fabs(dp_[j]) + d_abs);
      for (int64_t d = 0; d < D; ++d) {
        r_.dq[qi * D + d] += scale * ds * k_[kj * D + d];
        r_.dk[kj * D + d] += scale * ds * q_[qi * D + d];
        r_.dv[kj * D + d] += prob_[j] * f_[j] * dout_[qi * D + d];
      }
      dq_mag += scale * ds_abs * MaxAbsRow(k_, kj, D);
      dk_mag_[kj] += scale * ds_abs * q_max;
      dv_mag_[kj] += prob_[j] * f_[j] * dout_max;
    }
    r_.dq_mag = std::max(r_.dq_mag, dq_mag);
  }

  const AttentionDims& dm_;
  const ops::AttentionArgs& args_;
  const bool causal_;
  const std::vector<double>& q_;     // [B, NH, Tq, D]
  const std::vector<double>& k_;     // [B, G, Tk, D]
  const std::vector<double>& v_;     // [B, G, Tk, D]
  const std::vector<double>& dout_;  // [B, NH, Tq, D]
  std::vector<double> mask_;         // [B, Tk], empty without a padding mask
  AttentionRef r_;
  std::vector<double> dk_mag_, dv_mag_;  // [B G Tk]
  double s_max_ = 0, lse_max_ = 0;
  std::vector<double> s_, prob_, f_, dp_;  // [Tk]: the current row's terms
};

}  // namespace

AttentionRef AttentionReference(const AttentionDims& dm, const ops::AttentionArgs& args,
                                const std::vector<double>& q, const std::vector<double>& k,
                                const std::vector<double>& v, const std::vector<double>& dout) {
  ReferenceRows rows(dm, args, q, k, v, dout);
  for (int64_t bh = 0; bh < dm.B * dm.NH; ++bh) {
    for (int64_t i = 0; i < dm.Tq; ++i) rows.Row(bh, i);
  }
  return rows.Finish();
}

AttentionRef AttentionReference(const AttentionDims& d, const ops::AttentionArgs& args,
                                const AttentionInputs& in) {
  return AttentionReference(d, args, ToDoubles(in.q.view()), ToDoubles(in.k.view()),
                            ToDoubles(in.v.view()), ToDoubles(in.dout.view()));
}

void ExpectNearReference(const AttentionResult& r, const AttentionRef& ref, DType dtype) {
  // f32 scores, sums and products (relative error prob_err in each term), one rounding of each
  // output (2u relative); the backward also reads the rounded out (u).
  const double u = UnitRoundoff(dtype);
  const double e = 4.0 * (u + ref.prob_err);
  EXPECT_TRUE(AllClose(r.out.view(), ref.out, 2 * u, e * ref.out_mag + 1e-30));
  EXPECT_TRUE(LseClose(r.lse.view(), ref.lse, 4.0 * ref.prob_err));
  EXPECT_TRUE(AllClose(r.dq.view(), ref.dq, 2 * u, e * ref.dq_mag + 1e-30));
  EXPECT_TRUE(AllClose(r.dk.view(), ref.dk, 2 * u, e * ref.dk_mag + 1e-30));
  EXPECT_TRUE(AllClose(r.dv.view(), ref.dv, 2 * u, e * ref.dv_mag + 1e-30));
  const int64_t D = r.out.shape().back();
  for (const auto& [t, zero] :
       {std::make_pair(&r.out, &ref.out_zero), std::make_pair(&r.dq, &ref.dq_zero),
        std::make_pair(&r.dk, &ref.dk_zero), std::make_pair(&r.dv, &ref.dv_zero)}) {
    const std::vector<double> got = ToDoubles(t->view());
    for (size_t i = 0; i < got.size(); ++i) {
      if ((*zero)[i / D]) {
        ASSERT_EQ(got[i], 0.0) << "element " << i << " of " << t->view().DebugString();
      }
    }
  }
}

void ExpectDropoutMaskOfTheDropoutOp(const AttentionForward& forward) {
  const AttentionDims d{2, 2, 7, 24, 24};
  struct Variant {
    bool causal;
    int64_t key_inner, key_outer_stride, key_base;
  };
  const Variant variants[] = {
      {false, -1, 0, 0}, {true, -1, 0, 0}, {true, 5, 9, 3}, {false, 0, 0, 11}};
  for (const Variant& var : variants) {
    const bool causal = var.causal;
    SCOPED_TRACE(absl::StrCat(causal ? "causal" : "not causal", " key_inner ", var.key_inner));
    AttentionInputs in = RandomAttentionInputs(d, DType::kF32, 70);
    std::vector<double> onehot(d.B * d.NH * d.Tk * d.D, 0.0);
    for (int64_t r = 0; r < d.B * d.NH * d.Tk; ++r) onehot[r * d.D + r % d.Tk] = 1.0;
    in.v = FromDoubles(d.KShape(), DType::kF32, onehot);
    const Tensor mask = RandomPaddingMask(d.B, d.Tk, 71);
    ops::AttentionArgs args = MakeAttentionArgs(d, causal, &mask.view(), 0.5f);
    if (var.key_inner >= 0) {
      args.dropout.key_inner = var.key_inner;
      args.dropout.key_outer_stride = var.key_outer_stride;
      args.dropout.key_base = var.key_base;
    }
    const Tensor out_tensor = forward(d, in, args, mask);
    // The Dropout op's mask on a tensor of ones shaped like the probabilities.
    const Shape probs_shape = {d.B, d.NH, d.Tq, d.Tk};
    Tensor ones =
        FromDoubles(probs_shape, DType::kF32, std::vector<double>(NumElements(probs_shape), 1.0));
    Tensor kept = Tensor::Host(probs_shape, DType::kF32);
    ASSERT_TRUE(ops::Dropout(ExecContext{}, ones.view(), args.dropout, kept.view()).ok());
    const std::vector<double> out = ToDoubles(out_tensor.view()), keep = ToDoubles(kept.view());
    const int32_t* m = mask.data_as<int32_t>();
    int64_t dropped = 0, nonzero = 0;
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      for (int64_t i = 0; i < d.Tq; ++i) {
        for (int64_t j = 0; j < d.Tk; ++j) {
          const int64_t lin = (bh * d.Tq + i) * d.Tk + j;
          const bool visible = (!causal || j <= i + d.Tk - d.Tq) && m[(bh / d.NH) * d.Tk + j] != 0;
          ASSERT_EQ(out[lin] != 0.0, visible && keep[lin] != 0.0) << "element " << lin;
          dropped += visible && keep[lin] == 0.0;
          nonzero += out[lin] != 0.0;
        }
      }
    }
    // Both kinds occur (p = 0.5).
    EXPECT_GT(dropped, 20);
    EXPECT_GT(nonzero, 20);
  }
}

}  // namespace testing
}  // namespace mt
