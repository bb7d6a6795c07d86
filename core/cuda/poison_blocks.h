// Whether the caching allocator fills every block it hands out with 0xFF bytes (NaN in every
// float type), so that a kernel reading memory nobody wrote gives NaN instead of whatever a
// previous tensor left there. Chosen when the binary is built, not at run time: true under the
// CUDA emulator (--config=cuda_emu, which poisons fresh device memory the same way:
// docs/cuda_emulator.md) and for the GPU tests tools/gpu_check.sh builds
// (--define=mt_poison_blocks=on), false otherwise (poison_blocks_off.cc).
#ifndef MT_CORE_CUDA_POISON_BLOCKS_H_
#define MT_CORE_CUDA_POISON_BLOCKS_H_

namespace mt {
namespace cuda {
namespace internal {

bool PoisonCachedBlocks();

}  // namespace internal
}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_POISON_BLOCKS_H_
