// Deterministic per-column sums over the rows of a [rows, cols] problem (internal; for .cu files).
//
// Phase 1 splits the rows into RowBlocks(rows, cols) fixed blocks (a function of the shape only);
// a 32 x 8 thread block sums one 32-column tile of one row block, each of the 8 row lanes
// sequentially over every 8th row, then the 8 lanes in order, into partial[term][block][col].
// Phase 2 sums the row blocks in order. No atomics: the result is the same on every run and GPU.
#ifndef MT_CORE_CUDA_COLUMN_SUM_CUH_
#define MT_CORE_CUDA_COLUMN_SUM_CUH_

#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace internal {

constexpr int kColTile = 32;
constexpr int kRowLanes = 8;

inline int64_t ColumnSumRowBlocks(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t col_tiles = (cols + kColTile - 1) / kColTile;
  int64_t blocks = (rows + 63) / 64;         // At least 64 rows (8 per lane) per block...
  const int64_t by_grid = 2048 / col_tiles;  // ...and about 2048 thread blocks in all.
  if (blocks > by_grid) blocks = by_grid;
  if (blocks > 1024) blocks = 1024;
  return blocks < 1 ? 1 : blocks;
}

// Floats of scratch for kTerms sums.
inline int64_t ColumnSumScratchFloats(int kTerms, int64_t rows, int64_t cols) {
  return kTerms * ColumnSumRowBlocks(rows, cols) * cols;
}

// fn(r, c, acc) adds row r's terms for column c into acc[0 .. kTerms).
template <int kTerms, typename Fn>
__global__ void ColumnPartialKernel(Fn fn, int64_t rows, int64_t cols, int64_t rows_per_block,
                                    float* partial) {
  __shared__ float lanes[kTerms][kRowLanes][kColTile];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  float acc[kTerms];
#pragma unroll
  for (int t = 0; t < kTerms; ++t) acc[t] = 0.0f;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) fn(r, c, acc);
  }
#pragma unroll
  for (int t = 0; t < kTerms; ++t) lanes[t][threadIdx.y][threadIdx.x] = acc[t];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
#pragma unroll
    for (int t = 0; t < kTerms; ++t) {
      float s = 0.0f;
      for (int l = 0; l < kRowLanes; ++l) s += lanes[t][l][threadIdx.x];
      partial[(static_cast<int64_t>(t) * gridDim.y + blockIdx.y) * cols + c] = s;
    }
  }
}

// out_t[c] = sum over row blocks b (in order) of partial[t][b][c], rounded once to P.
template <int kTerms, typename P>
__global__ void ColumnFinishKernel(const float* partial, int64_t row_blocks, int64_t cols, P* out0,
                                   P* out1) {
  for (int64_t c = GlobalThread(); c < cols; c += GridStride()) {
#pragma unroll
    for (int t = 0; t < kTerms; ++t) {
      float s = 0.0f;
      for (int64_t b = 0; b < row_blocks; ++b) s += partial[(t * row_blocks + b) * cols + c];
      Store(t == 0 ? out0 + c : out1 + c, s);
    }
  }
}

// Both phases; `scratch` holds ColumnSumScratchFloats(kTerms, rows, cols) floats. With no rows
// the outputs are zeros.
template <int kTerms, typename P, typename Fn>
LaunchResult LaunchColumnSum(const Fn& fn, int64_t rows, int64_t cols, float* scratch, P* out0,
                             P* out1, cudaStream_t stream) {
  if (cols <= 0) return {};
  const int64_t row_blocks = ColumnSumRowBlocks(rows, cols);
  if (row_blocks > 0) {
    const int64_t rows_per_block = (rows + row_blocks - 1) / row_blocks;
    const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile),
                    static_cast<unsigned>(row_blocks));
    const dim3 block(kColTile, kRowLanes);
    MT_LAUNCH(grid, block, 0, stream, ColumnPartialKernel<kTerms, Fn>)
    (fn, rows, cols, rows_per_block, scratch);
    MT_CHECK_LAUNCH();
  }
  MT_LAUNCH(GridFor(cols), kThreads, 0, stream, ColumnFinishKernel<kTerms, P>)
  (scratch, row_blocks, cols, out0, out1);
  MT_CHECK_LAUNCH();
  return {};
}

}  // namespace internal
}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_COLUMN_SUM_CUH_
