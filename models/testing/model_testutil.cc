#include "models/testing/model_testutil.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/ops/adam.h"
#include "gtest/gtest.h"
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
  nn::StepContext sc;
  sc.exec = ec;
  sc.tp = tp;
  sc.mode = mode;
  sc.dropout_seed = 1234;
  sc.micro_step = 3;
  return sc;
}

// A model of `config` in a fresh store of this TP rank, allocated from kSeed.
struct Built {
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<Model> model;
};
bool Build(const ModelConfig& config, int tp_rank, int tp_size, Built* out) {
  out->store = std::make_unique<nn::ParameterStore>(tp_rank, tp_size);
  auto model = CreateModel(config, out->store.get());
  if (!Ok(model.status(), "creating the model")) return false;
  out->model = std::move(*model);
  return Ok(out->store->Allocate(kSeed), "allocating the parameters");
}

// Whether global element `g` of a parameter is a padding row of the vocabulary.
bool IsVocabPadding(const nn::ParamSpec& spec, int64_t g, int64_t vocab) {
  if (!spec.vocab_padded) return false;
  int64_t row = 1;
  for (size_t d = 1; d < spec.global_shape.size(); ++d) row *= spec.global_shape[d];
  return g / row >= vocab;
}

// EXPECTs that this rank's slice of every parameter and its gradient are the serial ones'.
void ExpectSlicesMatch(const nn::ParameterStore& serial, const nn::ParameterStore& store,
                       int64_t vocab, double rel) {
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    auto si = serial.Find(spec.name);
    if (!Ok(si.status(), "a TP parameter the serial model lacks")) continue;
    const TensorView lv = store.value(i), lg = store.grad(i);
    const TensorView sv = serial.value(*si), sg = serial.grad(*si);
    double gmax = 0;
    for (int64_t j = 0; j < sg.numel(); ++j) {
      gmax = std::max(gmax, std::fabs(double{sg.data_as<float>()[j]}));
    }
    int values = 0, grads = 0;
    for (int64_t j = 0; j < lv.numel(); ++j) {
      const int64_t g = nn::testing::GlobalIndexOf(spec, lv.shape, store.tp_rank(), j);
      if (IsVocabPadding(spec, g, vocab)) continue;
      values += lv.data_as<float>()[j] != sv.data_as<float>()[g];
      grads += std::fabs(lg.data_as<float>()[j] - sg.data_as<float>()[g]) > rel * gmax + 1e-9;
    }
    EXPECT_EQ(values, 0) << spec.name << " tp=" << store.tp_size();
    EXPECT_EQ(grads, 0) << spec.name << " tp=" << store.tp_size() << " (max |g| " << gmax << ")";
  }
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
                                             const Batch& batch, double rel) {
  AllReduces counts;
  ExecContext ec;
  Built serial, sharded;
  if (!Build(config, 0, 1, &serial) || !Build(config, tp.rank(), tp.size(), &sharded)) {
    return counts;
  }
  auto serial_loss = serial.model->ForwardBackward(Context(&ec, nullptr, nn::Mode::kTrain), batch,
                                                   Backward::kYes);
  if (!Ok(serial_loss.status(), "serial step")) return counts;
  const nn::StepContext sc = Context(&ec, tp.size() > 1 ? &tp : nullptr, nn::Mode::kTrain);
  tp.ResetCounters();
  if (!Ok(sharded.model->ForwardBackward(sc, batch, Backward::kNo).status(), "TP forward")) {
    return counts;
  }
  counts.forward = tp.ResetCounters().all_reduce;
  auto loss = sharded.model->ForwardBackward(sc, batch, Backward::kYes);
  if (!Ok(loss.status(), "TP step")) return counts;
  counts.backward = tp.ResetCounters().all_reduce - counts.forward;
  EXPECT_NEAR(loss->total, serial_loss->total, rel * std::fabs(serial_loss->total))
      << "tp=" << tp.size();
  ExpectSlicesMatch(*serial.store, *sharded.store, config.vocab_size, rel);
  return counts;
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
    labels.data_as<int32_t>()[i] = static_cast<int32_t>(((i * 7) % c.vocab_size + 3) % c.vocab_size);
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

}  // namespace testing
}  // namespace models
}  // namespace mt
