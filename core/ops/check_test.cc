#include "core/ops/check.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kUnimplemented = absl::StatusCode::kUnimplemented;

// Passes iff `s` has `code` and exactly `message`.
::testing::AssertionResult Fails(const absl::Status& s, absl::StatusCode code,
                                 const std::string& message) {
  if (s.code() == code && s.message() == message) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << s << ", expected " << absl::Status(code, message);
}

// Views into one host buffer (their contents are never read).
class CheckTest : public ::testing::Test {
 protected:
  TensorView At(int64_t offset, const Shape& shape, DType dtype = DType::kF32,
                Device device = Device::Cpu()) {
    return TensorView(buffer_.data() + offset, shape, dtype, device);
  }

  std::vector<float> buffer_ = std::vector<float>(256);
};

TEST_F(CheckTest, SingleTensorChecks) {
  const TensorView x = At(0, {2, 3});
  EXPECT_TRUE(CheckContiguous("Op", "x", x).ok());
  TensorView strided = x;
  strided.strides = {1, 2};
  EXPECT_TRUE(Fails(CheckContiguous("Op", "x", strided), kInvalid,
                    "Op: x (f32[2, 3] on cpu) must be contiguous"));
  TensorView no_data = x;
  no_data.data = nullptr;
  EXPECT_TRUE(Fails(CheckContiguous("Op", "x", no_data), kInvalid, "Op: x has no data"));
  no_data.shape = {2, 0};
  no_data.strides = ContiguousStrides(no_data.shape);
  EXPECT_TRUE(CheckContiguous("Op", "x", no_data).ok());  // Empty: no data needed.

  EXPECT_TRUE(CheckShape("Op", "x", x, {2, 3}).ok());
  EXPECT_TRUE(
      Fails(CheckShape("Op", "x", x, {3, 2}), kInvalid, "Op: x has shape [2, 3], expected [3, 2]"));
  EXPECT_TRUE(CheckRank("Op", "x", x, 2).ok());
  EXPECT_TRUE(Fails(CheckRank("Op", "x", x, 4), kInvalid,
                    "Op: x has shape [2, 3] (rank 2), expected rank 4"));
  EXPECT_TRUE(CheckMinRank("Op", "x", x, 2).ok());
  EXPECT_TRUE(Fails(CheckMinRank("Op", "x", x, 3), kInvalid,
                    "Op: x (f32[2, 3] on cpu) must have rank >= 3"));
  EXPECT_TRUE(Fails(CheckMinRank("Op", "s", At(0, {}), 1), kInvalid,
                    "Op: s (f32[] on cpu) must have rank >= 1"));
}

TEST_F(CheckTest, DTypeChecks) {
  const TensorView x = At(0, {4}, DType::kBF16);
  EXPECT_TRUE(CheckDType("Op", "x", x, kFloatDTypes).ok());
  EXPECT_TRUE(Fails(CheckDType("Op", "ids", At(0, {4}, DType::kI64), {DType::kI32}), kUnimplemented,
                    "Op: ids has unsupported dtype i64; supported: i32"));
  EXPECT_TRUE(Fails(CheckDType("Op", "x", At(0, {4}, DType::kI32), kFloatDTypes), kUnimplemented,
                    "Op: x has unsupported dtype i32; supported: f32, bf16, f16"));
  EXPECT_TRUE(CheckDTypeIs("Op", "x", x, DType::kBF16).ok());
  EXPECT_TRUE(Fails(CheckDTypeIs("Op", "lse", x, DType::kF32), kInvalid,
                    "Op: lse has dtype bf16, expected f32"));
}

TEST_F(CheckTest, AgainstAReference) {
  const TensorView q = At(0, {2, 3}), k16 = At(8, {2, 3}, DType::kF16);
  const TensorView v_gpu = At(16, {2, 3}, DType::kF32, Device::Cuda(1));
  EXPECT_TRUE(CheckDeviceOf("Op", {"k", &k16}, {"q", &q}).ok());
  EXPECT_TRUE(Fails(CheckDeviceOf("Op", {"v", &v_gpu}, {"q", &q}), kInvalid,
                    "Op: v is on cuda:1, expected cpu (the device of q)"));
  EXPECT_TRUE(CheckDTypeOf("Op", {"v", &v_gpu}, {"q", &q}).ok());
  EXPECT_TRUE(Fails(CheckDTypeOf("Op", {"k", &k16}, {"q", &q}), kInvalid,
                    "Op: k has dtype f16, expected f32 (the dtype of q)"));
}

TEST_F(CheckTest, CheckOperandsChecksLayoutDTypeAndDevice) {
  const TensorView x = At(0, {2, 3}), bias16 = At(8, {3}, DType::kF16);
  // Dtypes and shapes may differ.
  EXPECT_TRUE(CheckOperands("Op", {{"x", &x}, {"bias", &bias16}}, kFloatDTypes).ok());
  TensorView strided = bias16;
  strided.strides = {2};
  EXPECT_TRUE(Fails(CheckOperands("Op", {{"x", &x}, {"bias", &strided}}, kFloatDTypes), kInvalid,
                    "Op: bias (f16[3] on cpu) must be contiguous"));
  const TensorView ids = At(8, {3}, DType::kI32);
  EXPECT_TRUE(Fails(CheckOperands("Op", {{"x", &x}, {"ids", &ids}}, kFloatDTypes), kUnimplemented,
                    "Op: ids has unsupported dtype i32; supported: f32, bf16, f16"));
  // The first operand is checked too.
  EXPECT_TRUE(Fails(CheckOperands("Op", {{"ids", &ids}, {"x", &x}}, kFloatDTypes), kUnimplemented,
                    "Op: ids has unsupported dtype i32; supported: f32, bf16, f16"));
  const TensorView gpu = At(8, {3}, DType::kF32, Device::Cuda(0));
  EXPECT_TRUE(Fails(CheckOperands("Op", {{"x", &x}, {"bias", &bias16}, {"b", &gpu}}, kFloatDTypes),
                    kInvalid, "Op: b is on cuda:0, expected cpu (the device of x)"));
}

TEST_F(CheckTest, CheckMatchingAgainstAReferenceAndShape) {
  const TensorView q = At(0, {2, 3, 4}), k = At(24, {2, 5, 4}), v = At(64, {2, 5, 4});
  const Shape k_shape = {2, 5, 4};
  EXPECT_TRUE(CheckMatching("Op", {"q", &q}, {{"k", &k}, {"v", &v}}, kFloatDTypes, k_shape).ok());
  const TensorView v_bad = At(64, {2, 4, 4});
  EXPECT_TRUE(
      Fails(CheckMatching("Op", {"q", &q}, {{"k", &k}, {"v", &v_bad}}, kFloatDTypes, k_shape),
            kInvalid, "Op: v has shape [2, 4, 4], expected [2, 5, 4]"));
  const TensorView v16 = At(64, {2, 5, 4}, DType::kBF16);
  EXPECT_TRUE(Fails(CheckMatching("Op", {"q", &q}, {{"k", &k}, {"v", &v16}}, kFloatDTypes, k_shape),
                    kInvalid, "Op: v has dtype bf16, expected f32 (the dtype of q)"));
  // One fault per check, in the documented order: layout, supported dtype, device, dtype, shape.
  TensorView all_wrong = At(64, {3, 5, 4}, DType::kI32, Device::Cuda(0));
  const auto check = [&](const TensorView& t) {
    return CheckMatching("Op", {"q", &q}, {{"k", &k}, {"w", &t}}, kFloatDTypes, k_shape);
  };
  all_wrong.strides = {1, 1, 1};
  EXPECT_TRUE(
      Fails(check(all_wrong), kInvalid, "Op: w (i32[3, 5, 4] on cuda:0) must be contiguous"));
  all_wrong.strides = ContiguousStrides(all_wrong.shape);
  EXPECT_TRUE(Fails(check(all_wrong), kUnimplemented,
                    "Op: w has unsupported dtype i32; supported: f32, bf16, f16"));
  all_wrong.dtype = DType::kF16;
  EXPECT_TRUE(
      Fails(check(all_wrong), kInvalid, "Op: w is on cuda:0, expected cpu (the device of q)"));
  all_wrong.device = Device::Cpu();
  EXPECT_TRUE(
      Fails(check(all_wrong), kInvalid, "Op: w has dtype f16, expected f32 (the dtype of q)"));
  all_wrong.dtype = DType::kF32;
  EXPECT_TRUE(Fails(check(all_wrong), kInvalid, "Op: w has shape [3, 5, 4], expected [2, 5, 4]"));
  all_wrong.shape = k_shape;
  EXPECT_TRUE(check(all_wrong).ok());
}

TEST_F(CheckTest, CheckMatchingAgainstTheFirst) {
  const TensorView x = At(0, {3, 5}), y = At(16, {3, 5});
  EXPECT_TRUE(CheckMatching("Add", {{"a", &x}, {"b", &y}, {"out", &x}}, kFloatDTypes).ok());
  const TensorView b_bad = At(16, {5, 3});
  EXPECT_TRUE(Fails(CheckMatching("Add", {{"a", &x}, {"b", &b_bad}}, kFloatDTypes), kInvalid,
                    "Add: b has shape [5, 3], expected [3, 5]"));
  const TensorView y16 = At(16, {3, 5}, DType::kBF16);
  EXPECT_TRUE(Fails(CheckMatching("Gelu", {{"x", &x}, {"y", &y16}}, kFloatDTypes), kInvalid,
                    "Gelu: y has dtype bf16, expected f32 (the dtype of x)"));
  const TensorView y_gpu = At(16, {3, 5}, DType::kF32, Device::Cuda(0));
  EXPECT_TRUE(Fails(CheckMatching("Gelu", {{"x", &x}, {"y", &y_gpu}}, kFloatDTypes), kInvalid,
                    "Gelu: y is on cuda:0, expected cpu (the device of x)"));
}

TEST_F(CheckTest, OverlapOfByteRanges) {
  const TensorView a = At(10, {4});  // Floats [10, 14).
  EXPECT_TRUE(Overlap(a, a));
  EXPECT_TRUE(Overlap(a, At(13, {1})));
  EXPECT_TRUE(Overlap(At(13, {1}), a));
  EXPECT_TRUE(Overlap(a, At(0, {2, 8})));  // Contains a.
  EXPECT_TRUE(Overlap(At(11, {2}), a));    // Inside a.
  EXPECT_FALSE(Overlap(a, At(14, {4})));   // Adjacent after.
  EXPECT_FALSE(Overlap(At(6, {4}), a));    // Adjacent before.
  EXPECT_FALSE(Overlap(a, At(11, {0})));   // Empty views overlap nothing.
  EXPECT_FALSE(Overlap(At(11, {3, 0}), At(11, {3, 0})));
  // Byte ranges, not elements: two bf16 [2] views 4 bytes apart touch, 3 bytes apart overlap.
  EXPECT_FALSE(Overlap(At(1, {2}, DType::kBF16), At(2, {2}, DType::kBF16)));
  TensorView half = At(1, {2}, DType::kBF16);
  half.data = static_cast<char*>(half.data) + 2;
  EXPECT_TRUE(Overlap(half, At(2, {2}, DType::kBF16)));
}

TEST_F(CheckTest, CheckNoOverlapNamesBothTensors) {
  const TensorView q = At(0, {8}), k = At(8, {8}), out = At(16, {8}), lse = At(24, {4});
  EXPECT_TRUE(CheckNoOverlap("Op", {{"out", &out}, {"lse", &lse}}, {{"q", &q}, {"k", &k}}).ok());
  const TensorView out_on_k = At(12, {8});
  EXPECT_TRUE(
      Fails(CheckNoOverlap("Op", {{"out", &out_on_k}, {"lse", &lse}}, {{"q", &q}, {"k", &k}}),
            kInvalid, "Op: output out overlaps input k"));
  const TensorView lse_in_out = At(20, {4});
  EXPECT_TRUE(
      Fails(CheckNoOverlap("Op", {{"out", &out}, {"lse", &lse_in_out}}, {{"q", &q}, {"k", &k}}),
            kInvalid, "Op: outputs out and lse overlap"));
  // An empty output overlaps nothing.
  const TensorView empty = At(0, {0});
  EXPECT_TRUE(CheckNoOverlap("Op", {{"out", &empty}, {"lse", &lse}}, {{"q", &q}}).ok());
}

TEST_F(CheckTest, UnnamedListsAndDevices) {
  const TensorView a = At(0, {2}), b16 = At(2, {2}, DType::kBF16);
  const TensorView c_gpu = At(4, {2}, DType::kF32, Device::Cuda(0));
  EXPECT_TRUE(CheckSameDevice("Gemm", {&a, &b16}).ok());
  EXPECT_TRUE(Fails(CheckSameDevice("Gemm", {&a, &b16, &c_gpu}), kInvalid,
                    "Gemm: tensors on different devices (cpu and cuda:0)"));
  EXPECT_TRUE(CheckSameDType("Gemm", {&a, &c_gpu}).ok());
  EXPECT_TRUE(Fails(CheckSameDType("Gemm", {&a, &c_gpu, &b16}), kInvalid,
                    "Gemm: mixed dtypes (f32 and bf16)"));
  EXPECT_TRUE(Fails(UnsupportedDevice("Tanh", Device::Cuda(0)), kUnimplemented,
                    "Tanh: not implemented for cuda:0 (CUDA kernels for this op come with the "
                    "CUDA backend)"));
}

}  // namespace
}  // namespace ops
}  // namespace mt
