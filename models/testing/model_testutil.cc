#include "models/testing/model_testutil.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/ops/adam.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "models/multiple_choice.h"
#include "models/registry.h"
#include "nn/parameter.h"
#include "nn/parameter_testutil.h"

namespace mt {
namespace models {
namespace testing {

namespace {

constexpr uint64_t kSeed = 7;

// Reports a failed status as a test failure; true if it was OK.
bool Ok(const absl::Status& s, const char* what) {
  if (s.ok()) return true;
  ADD_FAILURE() << what << ": " << s;
  return false;
}

nn::StepContext Context(const ExecContext* ec, comm::Communicator* tp, nn::Mode mode) {
  nn::StepContext sc = nn::StepContext::Train(ec, tp, 1234, 3);
  sc.mode = mode;
  return sc;
}

// A model of `config` in a fresh f32 store of this TP rank (on `device`), allocated from `seed`.
struct Built {
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<Model> model;
};
bool Build(const ModelConfig& config, int tp_rank, int tp_size, Built* out,
           const ModelOptions& options = {}, uint64_t seed = kSeed, Device device = Device::Cpu()) {
  out->store = std::make_unique<nn::ParameterStore>(tp_rank, tp_size, DType::kF32, device);
  auto model = CreateModel(config, out->store.get(), options);
  if (!Ok(model.status(), "creating the model")) return false;
  out->model = std::move(*model);
  return Ok(out->store->Allocate(seed), "allocating the parameters");
}

// The outcome of one step of either objective.
struct StepResult {
  double total = 0;
  std::vector<double> parts;
  std::vector<int> predictions;  // Multiple choice only.
};

absl::StatusOr<StepResult> RunStep(Model& model, const nn::StepContext& sc, const Batch& batch,
                                   Objective objective, Backward backward) {
  StepResult r;
  if (objective == Objective::kMultipleChoice) {
    ASSIGN_OR_RETURN(MultipleChoiceModel * multiple_choice, MultipleChoiceOf(model));
    ASSIGN_OR_RETURN(MultipleChoiceResult mc, multiple_choice->MultipleChoice(sc, batch, backward));
    r.total = mc.loss;
    r.parts = {mc.loss};
    r.predictions = std::move(mc.predictions);
  } else {
    ASSIGN_OR_RETURN(Losses l, model.ForwardBackward(sc, batch, backward));
    r.total = l.total;
    r.parts = std::move(l.parts);
  }
  return r;
}

// A store's values and gradients (any device) on the host, flat in its own layout.
struct HostCopy {
  Tensor values, grads;  // f32 [NumLocalElements()]
  const float* value(const nn::ParameterStore& s, int i) const {
    return values.data_as<float>() + s.offset(i);
  }
  const float* grad(const nn::ParameterStore& s, int i) const {
    return grads.data_as<float>() + s.offset(i);
  }
};
bool CopyToHost(const nn::ParameterStore& store, const ExecContext& ec, HostCopy* out) {
  absl::StatusOr<Tensor> values = store.CopyValuesToHost(ec);
  absl::StatusOr<Tensor> grads = store.CopyGradsToHost(ec);
  if (!Ok(values.status(), "copying the values") || !Ok(grads.status(), "copying the gradients")) {
    return false;
  }
  out->values = std::move(values).value();
  out->grads = std::move(grads).value();
  return true;
}

// Whether global element `g` of a parameter is a padding row of the vocabulary.
bool IsVocabPadding(const nn::ParamSpec& spec, int64_t g, int64_t vocab,
                    const TensorParallelCheck& check) {
  const bool padded = spec.vocab_padded ||
                      std::find(check.vocab_padded.begin(), check.vocab_padded.end(), spec.name) !=
                          check.vocab_padded.end();
  if (!padded) return false;
  int64_t row = 1;
  for (size_t d = 1; d < spec.global_shape.size(); ++d) row *= spec.global_shape[d];
  return g / row >= vocab;
}

// The largest |gradient| of serial parameter i, or of the parameter that scales it when its
// gradient is zero in exact arithmetic (whose own noise must then stay below loss_rel of that).
double GradientScale(const nn::ParameterStore& serial, const HostCopy& host, int i,
                     const TensorParallelCheck& check) {
  auto largest = [&](int k) {
    double m = 0;
    const float* g = host.grad(serial, k);
    for (int64_t j = 0; j < serial.value(k).numel(); ++j) m = std::max(m, std::fabs(double{g[j]}));
    return m;
  };
  const std::string& name = serial.spec(i).name;
  for (const auto& [zero, scale_by] : check.zero_gradients) {
    if (zero != name) continue;
    auto k = serial.Find(scale_by);
    if (!Ok(k.status(), "the parameter that scales a zero gradient")) return 0;
    const double scale = largest(*k);
    EXPECT_LE(largest(i), check.loss_rel * scale) << name << ": not zero up to rounding";
    return scale;
  }
  return largest(i);
}

// EXPECTs that this rank's slice of every parameter and its gradient are the serial ones'.
void ExpectSlicesMatch(const nn::ParameterStore& serial, const nn::ParameterStore& store,
                       const ExecContext& store_exec, int64_t vocab,
                       const TensorParallelCheck& check) {
  HostCopy s, t;
  if (!CopyToHost(serial, ExecContext{}, &s) || !CopyToHost(store, store_exec, &t)) return;
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    auto si = serial.Find(spec.name);
    if (!Ok(si.status(), "a TP parameter the serial model lacks")) continue;
    const double gmax = GradientScale(serial, s, *si, check);
    EXPECT_GT(gmax, 0) << spec.name << ": the gradient check would be vacuous";
    const float *lv = t.value(store, i), *lg = t.grad(store, i);
    const float *sv = s.value(serial, *si), *sg = s.grad(serial, *si);
    int values = 0, grads = 0;
    for (int64_t j = 0; j < store.value(i).numel(); ++j) {
      const int64_t g = nn::testing::GlobalIndexOf(spec, store.value(i).shape, store.tp_rank(), j);
      if (IsVocabPadding(spec, g, vocab, check)) continue;
      values += lv[j] != sv[g];
      grads += std::fabs(lg[j] - sg[g]) > check.grad_rel * gmax + 1e-9;
    }
    EXPECT_EQ(values, 0) << spec.name << " tp=" << store.tp_size();
    EXPECT_EQ(grads, 0) << spec.name << " tp=" << store.tp_size() << " (max |g| " << gmax << ")";
  }
}

// EXPECTs that the TP model's gathered logits (eval mode) are the serial model's (real
// vocabulary columns), when the model has Logits.
void ExpectLogitsMatch(Model& serial, const nn::StepContext& serial_sc, Model& sharded,
                       const nn::StepContext& sharded_sc, const Batch& batch, double rel) {
  nn::StepContext ssc = serial_sc, sc = sharded_sc;
  ssc.mode = sc.mode = nn::Mode::kEval;
  const int64_t n = batch.tokens.numel(), sv = serial.padded_vocab(), v = sharded.padded_vocab();
  Tensor want = Tensor::Zeros({n, sv}, DType::kF32), got = Tensor::Zeros({n, v}, DType::kF32);
  const absl::Status s = sharded.Logits(sc, batch.tokens, got.view());
  if (absl::IsUnimplemented(s)) return;
  if (!Ok(s, "TP logits") || !Ok(serial.Logits(ssc, batch.tokens, want.view()), "logits")) return;
  int bad = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < serial.config().vocab_size; ++k) {
      const float a = got.data_as<float>()[r * v + k], e = want.data_as<float>()[r * sv + k];
      bad += !(std::fabs(a - e) <= rel * (1 + std::fabs(e)));
    }
  }
  EXPECT_EQ(bad, 0) << "logits differing beyond " << rel << " (1 + |serial|)";
}

}  // namespace

ParamMap ToParamMap(const nn::ParameterStore& store, int64_t vocab) {
  ParamMap m;
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    const TensorView v = store.value(i);
    std::vector<double> values(v.data_as<float>(), v.data_as<float>() + v.numel());
    if (spec.vocab_padded) values.resize(vocab * (v.numel() / v.dim(0)));
    m[spec.name] = std::move(values);
  }
  return m;
}

LmBatch MakeLmBatch(int64_t B, int64_t T, int64_t vocab) {
  LmBatch b{Tensor::Host({B, T}, DType::kI32), Tensor::Host({B, T}, DType::kI32)};
  for (int64_t i = 0; i < B * T; ++i) {
    b.tokens.data_as<int32_t>()[i] = static_cast<int32_t>((i * 11 + 2) % vocab);
    b.labels.data_as<int32_t>()[i] = static_cast<int32_t>((i * 13 + 5) % vocab);
  }
  return b;
}

AllReduces ExpectTensorParallelMatchesSerial(comm::Communicator& tp, const ModelConfig& config,
                                             const Batch& batch, const TensorParallelCheck& check) {
  AllReduces counts;
  const ExecContext cpu;
  const ExecContext& tp_exec = check.tp_exec != nullptr ? *check.tp_exec : cpu;
  Built serial, sharded;
  ModelOptions serial_options = check.options;
  serial_options.sequence_parallel = false;  // The serial reference of a sequence-parallel model.
  if (!Build(config, 0, 1, &serial, serial_options, check.seed) ||
      !Build(config, tp.rank(), tp.size(), &sharded, check.options, check.seed, tp_exec.device)) {
    return counts;
  }
  nn::StepContext ssc = Context(&cpu, nullptr, nn::Mode::kTrain);
  ssc.sample_offset = check.sample_offset;
  auto want = RunStep(*serial.model, ssc, batch, check.objective, Backward::kYes);
  if (!Ok(want.status(), "serial step")) return counts;
  nn::StepContext sc = Context(&tp_exec, tp.size() > 1 ? &tp : nullptr, nn::Mode::kTrain);
  sc.sample_offset = check.sample_offset;
  tp.ResetCounters();
  if (!Ok(RunStep(*sharded.model, sc, batch, check.objective, Backward::kNo).status(),
          "TP forward")) {
    return counts;
  }
  const comm::CommCounters f = tp.ResetCounters();
  auto got = RunStep(*sharded.model, sc, batch, check.objective, Backward::kYes);
  if (!Ok(got.status(), "TP step")) return counts;
  const comm::CommCounters fb = tp.ResetCounters();
  counts.forward = f.all_reduce;
  counts.backward = fb.all_reduce - f.all_reduce;
  counts.others = f.calls() + fb.calls() - f.all_reduce - fb.all_reduce;

  EXPECT_NEAR(got->total, want->total, check.loss_rel * std::fabs(want->total))
      << "tp=" << tp.size();
  EXPECT_EQ(got->parts.size(), want->parts.size());
  for (size_t k = 0; k < want->parts.size() && k < got->parts.size(); ++k) {
    EXPECT_NEAR(got->parts[k], want->parts[k], check.loss_rel * std::fabs(want->parts[k]))
        << "loss part " << k << " tp=" << tp.size();
  }
  EXPECT_EQ(got->predictions, want->predictions) << "tp=" << tp.size();
  if (config.hidden_dropout > 0 || config.attention_dropout > 0) {
    nn::StepContext eval = ssc;
    eval.mode = nn::Mode::kEval;
    auto eval_loss = RunStep(*serial.model, eval, batch, check.objective, Backward::kNo);
    if (Ok(eval_loss.status(), "serial eval step")) {
      EXPECT_GT(std::fabs(eval_loss->total - want->total), 1e-4) << "dropout changes nothing";
    }
  }
  ExpectSlicesMatch(*serial.store, *sharded.store, tp_exec, config.vocab_size, check);
  if (check.objective == Objective::kPretraining) {
    ExpectLogitsMatch(*serial.model, ssc, *sharded.model, sc, batch, check.grad_rel);
  }
  return counts;
}

AllReduces ExpectTensorParallelMatchesSerial(comm::Communicator& tp, const ModelConfig& config,
                                             const Batch& batch, double rel) {
  TensorParallelCheck check;
  check.loss_rel = check.grad_rel = rel;
  return ExpectTensorParallelMatchesSerial(tp, config, batch, check);
}

bool ExpectContextParallelMatchesSerialOrRefused(comm::Communicator& cp, const ModelConfig& config,
                                                 const Batch& batch, double rel) {
  ModelOptions options;
  options.context_parallel = cp.size();
  nn::ParameterStore probe(0, 1, DType::kF32);
  const absl::Status refused = CreateModel(config, &probe, options).status();
  if (!refused.ok()) {
    EXPECT_TRUE(absl::IsInvalidArgument(refused) || absl::IsUnimplemented(refused)) << refused;
    EXPECT_NE(refused.message().find("context parallel"), std::string::npos) << refused;
    return false;
  }
  Built serial, split;
  if (!Build(config, 0, 1, &serial) || !Build(config, 0, 1, &split, options)) return false;
  const ExecContext cpu;
  const nn::StepContext ssc = Context(&cpu, nullptr, nn::Mode::kTrain);
  nn::StepContext sc = ssc;
  sc.cp = cp.size() > 1 ? &cp : nullptr;
  auto want = serial.model->ForwardBackward(ssc, batch, Backward::kYes);
  auto got = split.model->ForwardBackward(sc, batch, Backward::kYes);
  if (!Ok(want.status(), "serial step") || !Ok(got.status(), "CP step")) return false;
  EXPECT_NEAR(got->total, want->total, rel * std::fabs(want->total)) << "cp=" << cp.size();
  // Each CP rank holds its chunks' share of every gradient; their sum is the serial gradient.
  if (!Ok(cp.AllReduce(split.store->flat_grads(), comm::ReduceOp::kSum), "gradient sum")) {
    return false;
  }
  for (int i = 0; i < serial.store->size(); ++i) {
    const std::vector<double> w = ::mt::testing::ToDoubles(serial.store->grad(i));
    const std::vector<double> g = ::mt::testing::ToDoubles(split.store->grad(i));
    const double scale = ::mt::testing::MaxAbs(w);
    EXPECT_GT(scale, 0) << serial.store->spec(i).name;
    size_t worst = 0;
    for (size_t j = 0; j < w.size(); ++j) {
      if (std::fabs(g[j] - w[j]) > std::fabs(g[worst] - w[worst])) worst = j;
    }
    if (!w.empty()) {
      EXPECT_NEAR(g[worst], w[worst], rel * scale)
          << serial.store->spec(i).name << "[" << worst << "] cp=" << cp.size();
    }
  }
  return true;
}

void ExpectGradientsMatchFiniteDifferences(const ModelConfig& config, const Batch& batch,
                                           int samples, double rel, double abs) {
  ModelConfig c = config;
  c.hidden_dropout = c.attention_dropout = 0;
  Built b;
  if (!Build(c, 0, 1, &b)) return;
  ExecContext ec;
  const nn::StepContext sc = Context(&ec, nullptr, nn::Mode::kEval);
  if (!Ok(b.model->ForwardBackward(sc, batch, Backward::kYes).status(), "backward")) return;
  auto loss_at = [&]() -> double {
    auto l = b.model->ForwardBackward(sc, batch, Backward::kNo);
    return Ok(l.status(), "forward") ? l->total : NAN;
  };
  const int per_tensor = std::max(1, samples / b.store->size());
  const double eps = 1e-2;
  int checked = 0;
  for (int i = 0; i < b.store->size(); ++i) {
    float* v = b.store->value(i).data_as<float>();  // f32 compute: the weights the model reads.
    const float* g = b.store->grad(i).data_as<float>();
    const int64_t n = b.store->value(i).numel();
    for (int k = 0; k < per_tensor; ++k) {
      const int64_t j = (k * 7919 + 13) % n;
      const float saved = v[j];
      v[j] = saved + static_cast<float>(eps);
      const double plus = loss_at();
      v[j] = saved - static_cast<float>(eps);
      const double minus = loss_at();
      v[j] = saved;
      const double numerical = (plus - minus) / (2 * eps), analytic = g[j];
      EXPECT_NEAR(analytic, numerical,
                  rel * std::max(std::fabs(analytic), std::fabs(numerical)) + abs)
          << b.store->spec(i).name << "[" << j << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, samples / 2);
}

Learning TrainOnPattern(const ModelConfig& config, int steps, float lr) {
  ModelConfig c = config;
  c.hidden_dropout = c.attention_dropout = 0;
  Learning out;
  Built b;
  if (!Build(c, 0, 1, &b)) return out;
  // Next token = (token + 3) mod vocab: learnable from content alone.
  const int64_t B = 2, T = 8;
  Tensor tokens = Tensor::Host({B, T}, DType::kI32), labels = Tensor::Host({B, T}, DType::kI32);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7) % c.vocab_size);
    labels.data_as<int32_t>()[i] =
        static_cast<int32_t>(((i * 7) % c.vocab_size + 3) % c.vocab_size);
  }
  ExecContext ec;
  const nn::StepContext sc = Context(&ec, nullptr, nn::Mode::kTrain);
  Tensor m = Tensor::Zeros({b.store->NumLocalElements()}, DType::kF32);
  Tensor v = Tensor::Zeros({b.store->NumLocalElements()}, DType::kF32);
  for (int step = 1; step <= steps; ++step) {
    if (!Ok(b.store->ZeroGrads(ec), "zeroing")) return out;
    auto loss = b.model->ForwardBackward(sc, LanguageModelBatch(tokens.view(), labels.view()),
                                         Backward::kYes);
    if (!Ok(loss.status(), "training step")) return out;
    if (step == 1) out.first = loss->total;
    out.last = loss->total;
    ops::AdamArgs a;
    a.lr = lr;
    a.step = step;
    if (!Ok(ops::AdamUpdate(ec, b.store->flat_values(), b.store->flat_grads(), m.view(), v.view(),
                            a),
            "Adam")) {
      return out;
    }
  }
  return out;
}

ModelConfig TinyConfig(Family family, nn::NormPosition norm, int layers, int64_t vocab,
                       int64_t positions) {
  ModelConfig c = ModelConfig::Sized(family, layers, 8, 2, vocab, positions);
  c.make_vocab_size_divisible_by = 4;
  c.norm = norm;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  c.init_std = 0.3;
  return c;
}

std::string PrecisionCaseName(const ::testing::TestParamInfo<PrecisionParam>& info) {
  const auto [dtype, norm] = info.param;
  return std::string(DTypeName(dtype)) + (norm == nn::NormPosition::kPreNorm ? "_pre" : "_post");
}

}  // namespace testing
}  // namespace models
}  // namespace mt
