#include "models/context_parallel.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/status.h"
#include "nn/context_parallel.h"

namespace mt {
namespace models {

absl::Status CheckContextParallel(const std::string& model, int context_parallel,
                                  const Device& device) {
  if (context_parallel < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, ": context-parallel size ", context_parallel, " must be >= 1"));
  }
  if (context_parallel == 1) return absl::OkStatus();
  if (!device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, ": context parallelism runs on the CPU only (ring attention has no ",
                     device.ToString(), " kernels yet); use --context_parallel_size=1 on a GPU"));
  }
  return absl::OkStatus();
}

absl::Status CheckStepContextParallel(const std::string& model, const nn::StepContext& sc,
                                      int context_parallel) {
  if (sc.cp_size() == context_parallel) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(model, ": built for context-parallel size ",
                                                 context_parallel, " but the step's CP group has ",
                                                 sc.cp_size(), " ranks"));
}

namespace {

// out [2B, c] <- this rank's chunks of `whole` [B, T] (host i32), chunk-major.
void CutRows(const nn::StepContext& sc, const TensorView& whole, Tensor* out) {
  const int64_t B = whole.dim(0), T = whole.dim(1), c = T / (2 * sc.cp_size());
  if (out->shape() != Shape{2 * B, c}) *out = Tensor::Host({2 * B, c}, DType::kI32);
  const int32_t* w = whole.data_as<int32_t>();
  int32_t* o = out->data_as<int32_t>();
  for (int h = 0; h < 2; ++h) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(o + (h * B + b) * c, w + b * T + nn::CpChunk(sc, h) * c, c * sizeof(int32_t));
    }
  }
}

// out [2C B, c] <- every chunk of `whole` [B, T], chunk-major.
void CutAllChunks(int C, const TensorView& whole, Tensor* out) {
  const int64_t B = whole.dim(0), T = whole.dim(1), c = T / (2 * C);
  if (out->shape() != Shape{2 * C * B, c}) *out = Tensor::Host({2 * C * B, c}, DType::kI32);
  for (int64_t k = 0; k < 2 * C; ++k) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(out->data_as<int32_t>() + (k * B + b) * c,
                  whole.data_as<int32_t>() + b * T + k * c, c * sizeof(int32_t));
    }
  }
}

}  // namespace

absl::StatusOr<Batch> ContextParallelBatch::Cut(const ExecContext& ec, const nn::StepContext& sc,
                                                const Batch& whole) {
  const int C = sc.cp_size();
  if (C == 1) return whole;
  const TensorView& t = whole.tokens;
  if (t.rank() != 2 || t.dtype != DType::kI32 || t.dim(1) % (2 * C) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("context parallelism: tokens ", t.DebugString(),
                                                   " must be i32 [B, T] with T divisible by ",
                                                   "2 x context-parallel size = ", 2 * C));
  }
  Batch local = whole;
  const TensorView* fields[] = {&whole.tokens, &whole.labels, &whole.token_types,
                                &whole.padding_mask};
  Tensor* cut[] = {&tokens_, &labels_, &token_types_, &mask_};
  TensorView* dst[] = {&local.tokens, &local.labels, &local.token_types, &local.padding_mask};
  static const char* const kNames[] = {"tokens", "labels", "token types", "padding mask"};
  for (int i = 0; i < 4; ++i) {
    if (fields[i]->data == nullptr) continue;
    if (fields[i]->shape != t.shape || fields[i]->dtype != DType::kI32) {
      return absl::InvalidArgumentError(
          absl::StrCat("context parallelism: ", kNames[i], " ", fields[i]->DebugString(),
                       " must be i32 with the tokens' shape ", t.DebugString()));
    }
    ASSIGN_OR_RETURN(TensorView host, OnHost(ec, *fields[i], &staging_[i], kNames[i]));
    if (i == 3) {
      CutAllChunks(C, host, cut[i]);
    } else {
      CutRows(sc, host, cut[i]);
    }
    *dst[i] = cut[i]->view();
  }
  return local;
}

absl::Status CpDropout(const nn::StepContext& sc, const TensorView& x,
                       const ops::DropoutArgs& whole, int64_t chunk_len, int64_t width,
                       bool backward, const TensorView& y) {
  const auto drop = backward ? ops::DropoutBackward : ops::Dropout;
  if (sc.cp_size() == 1) return drop(*sc.exec, x, whole, y);
  for (int h = 0; h < 2; ++h) {
    RETURN_IF_ERROR(drop(*sc.exec, nn::CpHalf(x, h),
                         nn::CpChunkDropout(sc, whole, chunk_len, width, h), nn::CpHalf(y, h)));
  }
  return absl::OkStatus();
}

Shape ContextParallelBoundaryShape(int64_t batch, int64_t seq_length, int cp, int sp,
                                   int64_t hidden) {
  if (cp > 1) return {2 * batch, seq_length / (2 * cp) / sp, hidden};
  return {batch, seq_length / sp, hidden};
}

Tensor CpPositions(const nn::StepContext& sc, int64_t B, int64_t c) {
  const int halves = sc.cp_size() > 1 ? 2 : 1;
  Tensor p = Tensor::Host({halves * B * c}, DType::kI32);
  int32_t* pos = p.data_as<int32_t>();
  for (int h = 0; h < halves; ++h) {
    const int64_t start = halves == 2 ? nn::CpChunk(sc, h) * c : 0;
    for (int64_t i = 0; i < B * c; ++i) {
      pos[h * B * c + i] = static_cast<int32_t>(start + i % c);
    }
  }
  return p;
}

absl::StatusOr<std::vector<double>> CpSum(const nn::StepContext& sc,
                                          const std::vector<double>& local) {
  if (sc.cp_size() == 1 || local.empty()) return local;
  // Each rank's doubles as i64 bit patterns, gathered in one call and added in rank order (no
  // f32 rounding).
  const int64_t n = static_cast<int64_t>(local.size());
  Tensor in = Tensor::Host({n}, DType::kI64), out = Tensor::Host({sc.cp_size() * n}, DType::kI64);
  std::memcpy(in.data(), local.data(), n * sizeof(double));
  RETURN_IF_ERROR(sc.cp->AllGather(in.view(), out.view()));
  std::vector<double> sum(n, 0.0);
  for (int r = 0; r < sc.cp_size(); ++r) {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, out.data_as<int64_t>() + r * n + i, sizeof(double));
      sum[i] += v;
    }
  }
  return sum;
}

absl::StatusOr<double> CpSum(const nn::StepContext& sc, double local) {
  ASSIGN_OR_RETURN(const std::vector<double> sum, CpSum(sc, std::vector<double>{local}));
  return sum[0];
}

}  // namespace models
}  // namespace mt
