// Loading a checkpoint into a store on a GPU (tagged "gpu"; skips without a device): a TP=2
// checkpoint loaded at TP 1 and 2 on cuda:0 in bf16 holds the saved global weights, and its
// compute copies are bit for bit those of the same load on the CPU.
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_testutil.h"
#include "checkpoint/model_loading.h"
#include "checkpoint/model_loading_testutil.h"
#include "core/alloc.h"
#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {
namespace {

TEST(ModelLoadingCudaTest, LoadsIntoAGpuStore) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << cuda::Describe();
  auto device_context = cuda::DeviceContext::Create(0);
  ASSERT_TRUE(device_context.ok()) << device_context.status();
  ExecContext gpu;
  gpu.device = Device::Cuda(0);
  gpu.cuda = device_context->get();

  const models::ModelConfig config = testing::TinyConfig(models::Family::kGpt2, 1, 2, 61, 24);
  const std::string dir = testing::FreshDir("cuda_load");
  auto ranks = testing::BuildRanks(config, 2, /*seed=*/3);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  for (testing::RankModel& r : *ranks) ASSERT_OK(testing::FillWithPattern(r.store.get()));
  ASSERT_TRUE(testing::SaveRanks(dir, 7, config.ToJson(), "tiny", *ranks, true).ok());

  LoadModelOptions options;
  options.compute_dtype = DType::kBF16;
  for (int tp : {1, 2}) {
    for (int rank = 0; rank < tp; ++rank) {
      SCOPED_TRACE(absl::StrCat("rank ", rank, " of ", tp));
      auto on_gpu = LoadModel(dir, rank, tp, gpu, options);
      ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
      EXPECT_EQ(on_gpu->store->device(), Device::Cuda(0));
      EXPECT_TRUE(testing::HoldsPattern(*on_gpu->store, gpu, config.vocab_size));
      auto on_cpu = LoadModel(dir, rank, tp, ExecContext{}, options);
      ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
      const TensorView cpu_copies = on_cpu->store->flat_compute_values();
      auto gpu_copies = CopyToHost(gpu, on_gpu->store->flat_compute_values());
      ASSERT_TRUE(gpu_copies.ok()) << gpu_copies.status();
      ASSERT_EQ(gpu_copies->nbytes(), cpu_copies.nbytes());
      EXPECT_EQ(0, std::memcmp(gpu_copies->data(), cpu_copies.data, cpu_copies.nbytes()));
    }
  }
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt
