// --async_save's copy of a store in host memory, made by the background writer while the next
// iteration runs (AsyncSaver, SnapshotTrainingState's defer_copy): the optimizer's update waits
// for it, so the checkpoint holds the state of the iteration it names however late the writer
// copies; without that wait it would hold the state after the next update (the second test, so
// the first can fail). One MPI rank.
#include "train/async_save.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_testutil.h"
#include "comm/parallel_context.h"
#include "core/file_system.h"
#include "core/ops/testutil.h"
#include "core/status_testutil.h"
#include "models/config.h"
#include "nn/parameter.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/training_state.h"

namespace mt {
namespace train {
namespace {

using comm::testing::MpiTest;

// A store of two parameters with an optimizer that has taken one step (non-zero moments).
struct State {
  nn::ParameterStore store{0, 1};
  std::unique_ptr<Optimizer> optimizer;
  LossScaler scaler{LossScalerConfig{}};
  LrSchedule schedule{LrScheduleConfig{}};
  TrainingCounters counters;

  State() {
    EXPECT_OK(store.Add({"w", {256, 512}, -1, nn::Init::kNormal, 0.5, true}).status());
    EXPECT_OK(store.Add({"b", {512}, -1, nn::Init::kNormal, 0.5, false}).status());
    EXPECT_OK(store.Allocate(7));
    auto o = Optimizer::Create(&store, OptimizerConfig{});
    EXPECT_OK(o.status());
    optimizer = std::make_unique<Optimizer>(std::move(*o));
    Step(1);
    counters.iteration = 1;
  }
  // One optimizer step with random gradients.
  void Step(uint64_t seed) {
    const int64_t n = store.NumLocalElements();
    Tensor g = ::mt::testing::RandomTensor({n}, DType::kF32, seed, -1, 1);
    std::memcpy(store.flat_grads().data, g.data(), g.nbytes());
    EXPECT_OK(optimizer->Step(ExecContext{}, nullptr, nullptr, 1e-2, 1.0).status());
  }
  // The masters and both moments, concatenated.
  std::vector<float> Flat() const {
    std::vector<float> out;
    for (const TensorView& t :
         {store.flat_values(), optimizer->exp_avg(), optimizer->exp_avg_sq()}) {
      const float* p = t.data_as<float>();
      out.insert(out.end(), p, p + t.numel());
    }
    return out;
  }
};

// Saves `s` in the background with the writer's copy held back until 0.2 s after Start, while
// `s` takes its next step (waiting for the copy first when `wait`); returns the state loaded back.
std::vector<float> SaveDuringNextStep(comm::Communicator& world, State& s, const std::string& dir,
                                      bool wait, double* waited) {
  auto parallel = comm::ParallelContext::Create(world, {}, 1);
  EXPECT_OK(parallel.status());
  const models::ModelConfig config;
  auto snapshot = SnapshotTrainingState(**parallel, config, s.store, *s.optimizer, s.scaler,
                                        s.schedule, s.counters, "", nullptr, nullptr,
                                        /*defer_copy=*/true);
  EXPECT_OK(snapshot.status());
  EXPECT_TRUE((*snapshot)->copy_deferred());
  AsyncSaver saver(dir, 0, parallel->get(), &DefaultFileSystem());
  std::atomic<bool> release{false};
  saver.set_before_copy_for_testing([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  if (wait) s.optimizer->set_before_update([&] { saver.WaitForCopy(); });
  EXPECT_OK(saver.Start(std::move(*snapshot)));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    release.store(true);
  });
  s.Step(2);
  releaser.join();
  EXPECT_OK(saver.Finish());
  *waited = saver.copy_wait_seconds();
  s.optimizer->set_before_update(nullptr);
  State loaded;  // Another initialisation, overwritten by the load.
  EXPECT_OK(LoadTrainingState(dir, **parallel, config, &loaded.store, loaded.optimizer.get(),
                              &loaded.scaler, &loaded.schedule, &loaded.counters,
                              DefaultFileSystem(), checkpoint::CheckpointVerify::kCrc32c));
  EXPECT_EQ(loaded.counters.iteration, 1);
  return loaded.Flat();
}

class AsyncSaveTest : public MpiTest {
 protected:
  std::string Dir(const char* name) {
    const std::string d = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
    std::filesystem::remove_all(d);
    return d;
  }
};

TEST_F(AsyncSaveTest, TheUpdateWaitsForTheWritersCopy) {
  State s;
  const std::vector<float> at_save = s.Flat();
  double waited = 0;
  const std::vector<float> saved = SaveDuringNextStep(*comm_, s, Dir("wait"), true, &waited);
  EXPECT_NE(s.Flat(), at_save);  // The step after the save did change the state.
  EXPECT_EQ(saved, at_save);     // The checkpoint holds the state at the save, bit for bit.
  EXPECT_GT(waited, 0.1);        // The update waited for the held-back copy.
}

TEST_F(AsyncSaveTest, WithoutTheWaitTheCheckpointWouldHoldTheNextState) {
  State s;
  const std::vector<float> at_save = s.Flat();
  double waited = 0;
  const std::vector<float> saved = SaveDuringNextStep(*comm_, s, Dir("no_wait"), false, &waited);
  EXPECT_NE(saved, at_save);
  EXPECT_EQ(saved, s.Flat());
  EXPECT_EQ(waited, 0.0);
}

}  // namespace
}  // namespace train
}  // namespace mt
