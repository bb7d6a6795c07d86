// A trained model loaded for inference (text generation, the generation server): the device, the
// tensor-parallel group, the model from the checkpoint's own config, and its weights.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> s, LoadForInference(config, world, local));
//   ASSIGN_OR_RETURN(auto out, Generate(s->Step(), *s->model, prompts, generate_config));
//
// The job is one tensor-parallel group: every rank of `world` is one TP rank, whatever degree the
// checkpoint was saved at (any that divides the heads; resharded in memory by
// checkpoint/model_loading.h, as the evaluation harnesses load). The model is whatever registered
// architecture the checkpoint's config names (link //models:all, or the variant's package).
// Weights are the checkpoint's f32 masters, run in the compute dtype --fp16 / --bf16 / --fp32
// choose (core/precision.h: f32 on the CPU, bf16 on CUDA by default), on the communicator
// --comm_backend chooses (comm/world_communicator.h).
#ifndef MT_SERVE_INFERENCE_H_
#define MT_SERVE_INFERENCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "comm/world_communicator.h"
#include "core/device.h"
#include "core/exec_context.h"
#include "core/fields.h"
#include "core/precision.h"
#include "core/rank_execution.h"
#include "models/model.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace serve {

struct InferenceConfig {
  std::string load;  // Checkpoint directory (its latest iteration).
  DeviceType device = DeviceType::kCpu;
  comm::CommBackend comm_backend = comm::CommBackend::kAuto;
  PrecisionFlags precision;
  int threads = 0;  // CPU threads per rank (0: cores / ranks on this host).
  checkpoint::CheckpointVerify checkpoint_verify = checkpoint::CheckpointVerify::kCrc32c;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("load", &self.load, "Checkpoint directory (pretrain_gpt --save); its latest iteration.");
    v("device", &self.device, "cpu, or cuda (each rank on GPU local_rank mod GPUs).",
      kDeviceTypeNames);
    v("comm_backend", &self.comm_backend,
      "With --device=cuda: nccl, mpi (staged through host memory; ranks may share a GPU) or "
      "auto (nccl when each local rank has its own GPU).",
      comm::kCommBackendNames);
    PrecisionFlags::Fields(self.precision, v);
    v("threads", &self.threads, "CPU threads per rank (0: cores / ranks on this host).");
    v("checkpoint_verify", &self.checkpoint_verify, checkpoint::kCheckpointVerifyHelp,
      checkpoint::kCheckpointVerifyNames);
  }
};

// Everything a loaded model needs alive (members destroyed in reverse order: the model's tensors
// before the device's allocator and context).
struct InferenceSession {
  RankExecution rank;                // Ops run on rank.exec.
  comm::WorldCommunicator world;     // TP > 1: the collectives, NCCL or the MPI world.
  comm::Communicator* tp = nullptr;  // world.comm when TP > 1; null for TP = 1.
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<models::Model> model;
  int64_t iteration = 0;   // Of the checkpoint loaded.
  std::string model_name;  // The registered model the checkpoint records (may be empty).

  // An eval-mode step context over rank.exec and tp.
  nn::StepContext Step() const;
};

// Every rank of `world` loads its slice; collective over `world` when it makes an NCCL
// communicator. local_rank / local_size: this process among the ranks on its host (the GPU, the
// thread count). Errors: InvalidArgument for an empty load, two precision flags, nccl off CUDA,
// or a world size that does not divide the heads; NotFound when the directory holds no
// checkpoint; FailedPrecondition for --device=cuda without a GPU; checkpoint::LoadModel's and
// comm::CreateWorldCommunicator's errors.
absl::StatusOr<std::unique_ptr<InferenceSession>> LoadForInference(const InferenceConfig& config,
                                                                   comm::Communicator& world,
                                                                   int local_rank, int local_size);

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_INFERENCE_H_
