// The configurations of the Megatron-LM paper (its Tables 1-6) and small ones for tests and
// the quickstart.
#include <string>
#include <vector>

#include "models/config.h"
#include "models/registry.h"

namespace mt {
namespace models {
namespace {

ModelConfig Gpt2(int layers, int64_t hidden, int heads) {
  return ModelConfig::Sized(Family::kGpt2, layers, hidden, heads, /*vocab=*/50257,
                            /*positions=*/1024);
}

ModelConfig Bert(int layers, int64_t hidden, int heads) {
  ModelConfig c = ModelConfig::Sized(Family::kBert, layers, hidden, heads, /*vocab=*/30522,
                                     /*positions=*/512);
  c.layernorm_eps = 1e-12f;
  return c;
}

std::vector<RegisteredModel> PaperModels() {
  std::vector<RegisteredModel> m;
  m.push_back({"gpt2-124m", "GPT-2 small (12 layers, 768 hidden, 12 heads)", Gpt2(12, 768, 12)});
  m.push_back({"gpt2-355m", "GPT-2 355M, paper Tables 2-3", Gpt2(24, 1024, 16)});
  m.push_back({"gpt2-1.2b", "GPT-2 1.2B, paper Table 1 (1 GPU baseline)", Gpt2(40, 1536, 16)});
  m.push_back(
      {"gpt2-2.5b", "GPT-2 2.5B, paper Table 1 (2-way MP) and Tables 2-3", Gpt2(54, 1920, 20)});
  m.push_back({"gpt2-4.2b", "GPT-2 4.2B, paper Table 1 (4-way MP)", Gpt2(64, 2304, 24)});
  m.push_back({"gpt2-8.3b", "GPT-2 8.3B, paper Table 1 (8-way MP; Table 2 lists 24 heads)",
               Gpt2(72, 3072, 32)});
  m.push_back({"bert-336m", "BERT 336M, paper Tables 4-6", Bert(24, 1024, 16)});
  m.push_back({"bert-1.3b", "BERT 1.3B, paper Tables 4-6", Bert(24, 2048, 32)});
  m.push_back({"bert-3.9b", "BERT 3.9B, paper Tables 4-6", Bert(48, 2560, 40)});
  ModelConfig tiny = Gpt2(4, 128, 4);
  tiny.max_position_embeddings = 256;
  m.push_back({"gpt2-tiny", "A 4-layer GPT-2 for the quickstart and tests", tiny});
  ModelConfig bert_tiny = Bert(2, 128, 4);
  bert_tiny.max_position_embeddings = 128;
  m.push_back({"bert-tiny", "A 2-layer BERT for tests", bert_tiny});
  return m;
}

MT_REGISTER_MODELS(PaperModels);

}  // namespace
}  // namespace models
}  // namespace mt
