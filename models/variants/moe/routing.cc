#include "models/variants/moe/routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "glog/logging.h"

namespace mt {
namespace models {
namespace moe {
namespace {

// probs and lse of every token.
void Softmax(const double* logits, Routing* r) {
  const int64_t N = r->tokens;
  const int E = r->experts;
  for (int64_t t = 0; t < N; ++t) {
    const double* l = logits + t * E;
    double m = l[0];
    for (int e = 1; e < E; ++e) m = std::max(m, l[e]);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(l[e] - m);
    r->lse[t] = m + std::log(sum);
    for (int e = 0; e < E; ++e) r->probs[t * E + e] = std::exp(l[e] - r->lse[t]);
  }
}

// The k experts of each token and their gates.
void Choose(Routing* r) {
  const int E = r->experts, k = r->topk;
  std::vector<int> order(E);
  for (int64_t t = 0; t < r->tokens; ++t) {
    const double* p = &r->probs[t * E];
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [p](int a, int b) { return p[a] > p[b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += p[order[j]];
    for (int j = 0; j < k; ++j) {
      r->chosen[t * k + j] = order[j];
      r->gate[t * k + j] = p[order[j]] / sum;
      ++r->routed[order[j]];
    }
  }
}

// Which slots each expert keeps (all, or its C most probable), in dispatch order.
void Dispatch(const RouterOptions& o, Routing* r) {
  const int E = r->experts, k = r->topk;
  const int64_t N = r->tokens;
  std::vector<std::vector<int64_t>> slots(E);  // slot ids t * k + j, by token
  for (int64_t s = 0; s < N * k; ++s) slots[r->chosen[s]].push_back(s);
  int64_t capacity = N * k;
  if (o.capacity_factor > 0) {
    capacity = static_cast<int64_t>(std::ceil(o.capacity_factor * static_cast<double>(N * k) / E));
  }
  r->offsets.assign(E + 1, 0);
  for (int e = 0; e < E; ++e) {
    std::vector<int64_t>& s = slots[e];
    if (static_cast<int64_t>(s.size()) > capacity) {
      std::stable_sort(s.begin(), s.end(), [&](int64_t a, int64_t b) {
        return r->probs[(a / k) * E + e] > r->probs[(b / k) * E + e];
      });
      s.resize(capacity);
      std::sort(s.begin(), s.end());
    }
    for (int64_t slot : s) {
      r->row[slot] = r->rows();
      r->token_of_row.push_back(static_cast<int32_t>(slot / k));
      r->slot_of_row.push_back(slot);
    }
    r->offsets[e + 1] = r->rows();
  }
}

// d(aux)/d(p[t, e]) (the same for every t).
std::vector<double> AuxProbGrad(const RouterOptions& o, const Routing& r) {
  std::vector<double> a(r.experts, 0.0);
  if (o.aux_coeff == 0 || r.tokens == 0) return a;
  const double N = static_cast<double>(r.tokens);
  for (int e = 0; e < r.experts; ++e) {
    const double f = static_cast<double>(r.routed[e]) / (N * r.topk);
    a[e] = o.aux_coeff * r.experts * f / N;
  }
  return a;
}

}  // namespace

Routing Route(const double* logits, int64_t tokens, const RouterOptions& o) {
  CHECK(o.topk >= 1 && o.topk <= o.experts) << "topk " << o.topk << " experts " << o.experts;
  Routing r;
  r.tokens = tokens;
  r.experts = o.experts;
  r.topk = o.topk;
  r.probs.assign(tokens * o.experts, 0.0);
  r.lse.assign(tokens, 0.0);
  r.chosen.assign(tokens * o.topk, 0);
  r.gate.assign(tokens * o.topk, 0.0);
  r.row.assign(tokens * o.topk, -1);
  r.routed.assign(o.experts, 0);
  Softmax(logits, &r);
  Choose(&r);
  Dispatch(o, &r);
  if (tokens > 0) {
    const std::vector<double> a = AuxProbGrad(o, r);
    double aux = 0, z = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int e = 0; e < o.experts; ++e) aux += a[e] * r.probs[t * o.experts + e];
      z += r.lse[t] * r.lse[t];
    }
    r.aux_loss = aux;
    r.z_loss = o.z_coeff * z / static_cast<double>(tokens);
  }
  return r;
}

void RouterBackward(const Routing& r, const RouterOptions& o, const double* dgate, double aux_scale,
                    float* dlogits) {
  const int E = r.experts, k = r.topk;
  const int64_t N = r.tokens;
  const std::vector<double> a = AuxProbGrad(o, r);
  std::vector<double> dl(E);
  for (int64_t t = 0; t < N; ++t) {
    const double* p = &r.probs[t * E];
    // Through the aux and z losses: d/dl_j = p_j (g_j - sum_e p_e g_e) with g = dLoss/dp.
    double pg = 0;
    for (int e = 0; e < E; ++e) pg += p[e] * a[e];
    const double z = o.z_coeff * 2.0 * r.lse[t] / static_cast<double>(N);
    for (int e = 0; e < E; ++e) dl[e] = aux_scale * (p[e] * (a[e] - pg) + z * p[e]);
    // Through the gates, a softmax over the chosen logits: d/dl_j = gate_j (dgate_j - sum gate
    // dgate).
    double gd = 0;
    for (int j = 0; j < k; ++j) gd += r.gate[t * k + j] * dgate[t * k + j];
    for (int j = 0; j < k; ++j) {
      dl[r.chosen[t * k + j]] += r.gate[t * k + j] * (dgate[t * k + j] - gd);
    }
    for (int e = 0; e < E; ++e) dlogits[t * E + e] = static_cast<float>(dl[e]);
  }
}

}  // namespace moe
}  // namespace models
}  // namespace mt
