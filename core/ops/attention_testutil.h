// Test helpers for the fused attention op (core/ops/attention.h): sizes, seeded inputs, padding
// masks and args as nn/attention.cc builds them, a float64 reference of the unfused math with the
// magnitudes that bound the op's rounding errors, and the check of a result against it. Shared by
// the CPU test and the CUDA test. testonly.
#ifndef MT_CORE_OPS_ATTENTION_TESTUTIL_H_
#define MT_CORE_OPS_ATTENTION_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ops/attention.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace mt {
namespace testing {

struct AttentionDims {
  int64_t B, NH, Tq, Tk, D;
  int64_t G = 0;  // Key/value heads (grouped-query attention); 0: NH.
  int64_t Groups() const { return G > 0 ? G : NH; }
  // The (batch, key/value head) pair that the (batch, query head) pair bh reads.
  int64_t KvHead(int64_t bh) const { return (bh / NH) * Groups() + (bh % NH) / (NH / Groups()); }
  Shape QShape() const { return {B, NH, Tq, D}; }
  Shape KShape() const { return {B, Groups(), Tk, D}; }
  Shape LseShape() const { return {B, NH, Tq}; }
  std::string Name() const;
};

// Host tensors: q, k in [-1.5, 1.5), v, dout in [-1, 1), rounded to dtype.
struct AttentionInputs {
  Tensor q, k, v, dout;
};
AttentionInputs RandomAttentionInputs(const AttentionDims& d, DType dtype, uint64_t seed);

// A host i32 [B, Tk] mask with about a third of the keys padded; key 0 of batch 0 is real and,
// when B > 1, the last batch row is fully padded.
Tensor RandomPaddingMask(int64_t B, int64_t Tk, uint64_t seed);

// scale 1 / sqrt(D), and a tensor-parallel style dropout key mapping like ParallelSelfAttention's:
// the NH local heads are heads [NH, 2 NH) of 3 NH, and the batch starts at sample 5.
ops::AttentionArgs MakeAttentionArgs(const AttentionDims& d, bool causal,
                                     const TensorView* padding_mask, float p);

// Forward outputs and gradients (host tensors).
struct AttentionResult {
  Tensor out, lse, dq, dk, dv;
};
// Every tensor of `a` bitwise that of `b` (testutil SameBits); names the first that differs.
::testing::AssertionResult SameBits(const AttentionResult& a, const AttentionResult& b);

struct AttentionRef {
  std::vector<double> out, lse, dq, dk, dv;
  // Componentwise magnitudes (each result with every term in absolute value; the dq/dk ones with
  // the row terms D_i taken from |dout| |out| as well): an error of relative size e in every term
  // is at most e times these.
  double out_mag = 0, dq_mag = 0, dk_mag = 0, dv_mag = 0;
  // Rows (of q) and keys (of k) with exact zeros by construction: out of a row whose visible keys
  // are all dropped, dq of a row that sees nothing, dk of a key no query sees, dv of a key that
  // every query seeing it drops.
  std::vector<bool> out_zero, dq_zero, dk_zero, dv_zero;
  // Relative error of an f32 probability: scores of D terms and sums of Tk terms, amplified by
  // the size of the exponents.
  double prob_err = 0;
};
// The unfused math in float64 (args.padding_mask, if any, on the host), with the dropout mask
// drawn by PhiloxUniform(seed, stream, DropoutKey(dropout, linear index)).
AttentionRef AttentionReference(const AttentionDims& d, const ops::AttentionArgs& args,
                                const std::vector<double>& q, const std::vector<double>& k,
                                const std::vector<double>& v, const std::vector<double>& dout);
AttentionRef AttentionReference(const AttentionDims& d, const ops::AttentionArgs& args,
                                const AttentionInputs& in);

// EXPECTs that r (computed in `dtype` from the reference's inputs) matches ref: every output
// within 2u relative + 4 (u + prob_err) times its magnitude (u: the dtype's unit roundoff), lse
// within 4 prob_err (-inf exactly where the reference has it), and the structural zeros exact.
void ExpectNearReference(const AttentionResult& r, const AttentionRef& ref, DType dtype);

// The op's forward output `out` (a host tensor) for inputs, args and the host padding mask.
using AttentionForward = std::function<Tensor(const AttentionDims& d, const AttentionInputs& in,
                                              const ops::AttentionArgs& args, const Tensor& mask)>;
// The fused op drops exactly what ops::Dropout drops. With v one-hot (Tk = D), out[i, j] is the
// kept probability of key j, so its zeros must be exactly where ops::Dropout (on the CPU) drops or
// the key is invisible. Checked with p = 0.5 for nn/'s dropout key mapping (causal and not), one
// that wraps inside rows (every 5 elements) and none; both kept and dropped elements must occur.
void ExpectDropoutMaskOfTheDropoutOp(const AttentionForward& forward);

}  // namespace testing
}  // namespace mt

#endif  // MT_CORE_OPS_ATTENTION_TESTUTIL_H_
