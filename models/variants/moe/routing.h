// Top-k routing of a mixture-of-experts layer, on the host in double precision: the router's
// probabilities, the chosen experts and their combine weights, the capacity that drops tokens,
// the dispatch order, the load-balancing and z losses, and the gradient of all of it with
// respect to the router logits. Pure functions of the logits: the module (moe_mlp.h) runs the
// router's GEMM and the experts on the device and asks this for every decision.
//
// With N tokens, E experts and k = topk:
//   p[t, e]     = softmax over e of logits[t, e]
//   chosen      = the k experts of largest p[t, .] (ties: the lower expert index first)
//   gate[t, j]  = p[t, e_j] / sum over the chosen of p[t, .] (a softmax over the chosen logits,
//                 as Mixtral and Megatron's default top-k router; 1 when k = 1)
//   f_e         = slots routed to e / (N k), counted before any drop (a step function: no grad)
//   P_e         = mean over t of p[t, e]
//   aux         = aux_coeff * E * sum_e f_e P_e  (Switch / Megatron; = aux_coeff when balanced)
//   z           = z_coeff * mean over t of logsumexp(logits[t, .])^2
// Capacity (capacity_factor > 0): expert e keeps at most C = ceil(factor * N * k / E) slots, the
// C of largest p[t, e] (ties: the lower token); a dropped slot contributes nothing to the output
// (its gate weight is not renormalised away). capacity_factor = 0: dropless.
// Dispatch order: the kept slots sorted by expert, then by token; expert e's rows are
// [offsets[e], offsets[e + 1]) of the dispatch buffer. An expert may get no rows.
#ifndef MT_MODELS_VARIANTS_MOE_ROUTING_H_
#define MT_MODELS_VARIANTS_MOE_ROUTING_H_

#include <cstdint>
#include <vector>

namespace mt {
namespace models {
namespace moe {

struct RouterOptions {
  int experts = 0;
  int topk = 1;
  double aux_coeff = 0;
  double z_coeff = 0;
  double capacity_factor = 0;  // 0: dropless.
};

struct Routing {
  int64_t tokens = 0;
  int experts = 0, topk = 0;
  std::vector<double> probs;          // [N, E]
  std::vector<double> lse;            // [N] logsumexp of each token's logits
  std::vector<int> chosen;            // [N, k] expert of each slot, by decreasing probability
  std::vector<double> gate;           // [N, k] combine weight of each slot
  std::vector<int64_t> row;           // [N, k] the slot's dispatch row, -1 when dropped
  std::vector<int64_t> routed;        // [E] slots routed to each expert (before dropping)
  std::vector<int64_t> offsets;       // [E + 1] dispatch rows of each expert (after dropping)
  std::vector<int32_t> token_of_row;  // [rows] the token each dispatch row carries
  std::vector<int64_t> slot_of_row;   // [rows] t * k + j of each dispatch row
  double aux_loss = 0;                // coefficient included
  double z_loss = 0;                  // coefficient included
  int64_t rows() const { return static_cast<int64_t>(token_of_row.size()); }
  int64_t dropped() const { return tokens * topk - rows(); }
};

// The routing of N tokens from their logits [N, E] (row-major). CHECKs that 1 <= topk <= E.
Routing Route(const double* logits, int64_t tokens, const RouterOptions& options);

// d(objective)/d(logits) [N, E] into dlogits (overwritten), where the objective is
// L(gate) + aux_scale * (aux + z) and dgate [N, k] = dL/dgate (zero for dropped slots is the
// caller's business: they do not reach the output).
void RouterBackward(const Routing& r, const RouterOptions& options, const double* dgate,
                    double aux_scale, float* dlogits);

}  // namespace moe
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_VARIANTS_MOE_ROUTING_H_
