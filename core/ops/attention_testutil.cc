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
  return absl::StrCat("B", B, " NH", NH, " Tq", Tq, " Tk", Tk, " D", D);
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

AttentionRef AttentionReference(const AttentionDims& dm, const ops::AttentionArgs& args,
                                const std::vector<double>& q, const std::vector<double>& k,
                                const std::vector<double>& v, const std::vector<double>& dout) {
  const int64_t NH = dm.NH, Tq = dm.Tq, Tk = dm.Tk, D = dm.D;
  const double scale = args.scale;
  const bool causal = args.causal == ops::CausalMask::kYes;
  std::vector<double> mask;
  if (args.padding_mask != nullptr) mask = ToDoubles(*args.padding_mask);
  AttentionRef r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(dm.B * NH * Tq, -INFINITY);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  r.out_zero.assign(dm.B * NH * Tq, true);
  r.dq_zero.assign(dm.B * NH * Tq, true);
  r.dk_zero.assign(dm.B * NH * Tk, true);
  r.dv_zero.assign(dm.B * NH * Tk, true);
  std::vector<double> dk_mag(dm.B * NH * Tk, 0.0), dv_mag(dm.B * NH * Tk, 0.0);
  double s_max = 0, lse_max = 0;
  std::vector<double> s(Tk), prob(Tk), f(Tk), dp(Tk);
  for (int64_t bh = 0; bh < dm.B * NH; ++bh) {
    const int64_t b = bh / NH;
    for (int64_t i = 0; i < Tq; ++i) {
      const int64_t qi = bh * Tq + i;
      auto visible = [&](int64_t j) {
        return (!causal || j <= i + (Tk - Tq)) && (mask.empty() || mask[b * Tk + j] != 0);
      };
      double m = -INFINITY;
      for (int64_t j = 0; j < Tk; ++j) {
        double dot = 0, dot_abs = 0;
        for (int64_t d = 0; d < D; ++d) {
          dot += q[qi * D + d] * k[(bh * Tk + j) * D + d];
          dot_abs += std::fabs(q[qi * D + d] * k[(bh * Tk + j) * D + d]);
        }
        s[j] = scale * dot;
        if (visible(j)) {
          m = std::max(m, s[j]);
          s_max = std::max(s_max, scale * dot_abs);
        }
      }
      if (m == -INFINITY) continue;  // Nothing visible: zero row, lse -inf, no gradient.
      double l = 0;
      for (int64_t j = 0; j < Tk; ++j) l += visible(j) ? std::exp(s[j] - m) : 0.0;
      r.lse[qi] = m + std::log(l);
      r.dq_zero[qi] = false;
      lse_max = std::max(lse_max, std::fabs(r.lse[qi]));
      double out_mag = 0;
      for (int64_t j = 0; j < Tk; ++j) {
        prob[j] = visible(j) ? std::exp(s[j] - m) / l : 0.0;
        f[j] = DropFactor(args.dropout, qi * Tk + j);
        for (int64_t d = 0; d < D; ++d) {
          r.out[qi * D + d] += prob[j] * f[j] * v[(bh * Tk + j) * D + d];
        }
        out_mag += prob[j] * f[j] * MaxAbsRow(v, bh * Tk + j, D);
        if (prob[j] * f[j] != 0.0) r.out_zero[qi] = r.dv_zero[bh * Tk + j] = false;
        if (prob[j] != 0.0) r.dk_zero[bh * Tk + j] = false;
      }
      r.out_mag = std::max(r.out_mag, out_mag);
      // Backward of out_i = sum_j P_j f_j v_j, P = softmax(s).
      double d_i = 0, d_abs = 0;
      for (int64_t j = 0; j < Tk; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += dout[qi * D + d] * v[(bh * Tk + j) * D + d];
        dp[j] = f[j] * dot;
        d_i += prob[j] * dp[j];
        d_abs += prob[j] * std::fabs(dp[j]);
      }
      for (int64_t d = 0; d < D; ++d) d_abs += std::fabs(dout[qi * D + d] * r.out[qi * D + d]);
      double dq_mag = 0;
      const double q_max = MaxAbsRow(q, qi, D), dout_max = MaxAbsRow(dout, qi, D);
      for (int64_t j = 0; j < Tk; ++j) {
        if (prob[j] == 0.0) continue;
        const int64_t kj = bh * Tk + j;
        const double ds = prob[j] * (dp[j] - d_i);
        const double ds_abs = prob[j] * (std::fabs(dp[j]) + d_abs);
        for (int64_t d = 0; d < D; ++d) {
          r.dq[qi * D + d] += scale * ds * k[kj * D + d];
          r.dk[kj * D + d] += scale * ds * q[qi * D + d];
          r.dv[kj * D + d] += prob[j] * f[j] * dout[qi * D + d];
        }
        dq_mag += scale * ds_abs * MaxAbsRow(k, kj, D);
        dk_mag[kj] += scale * ds_abs * q_max;
        dv_mag[kj] += prob[j] * f[j] * dout_max;
      }
      r.dq_mag = std::max(r.dq_mag, dq_mag);
    }
  }
  for (double x : dk_mag) r.dk_mag = std::max(r.dk_mag, x);
  for (double x : dv_mag) r.dv_mag = std::max(r.dv_mag, x);
  r.prob_err = (D + Tk + 8) * kU32 * (2.0 + 2.0 * s_max + lse_max);
  return r;
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
