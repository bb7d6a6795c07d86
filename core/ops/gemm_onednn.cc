#include "core/ops/gemm_onednn.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/onednn.h"

namespace mt {
namespace ops {
namespace internal {

thread_local int t_onednn_calls = 0;

namespace {

// Primitives kept; the cache is emptied when full (decoding with a growing context creates one
// per length). oneDNN keeps its own cache of compiled kernels behind this one.
constexpr size_t kCacheCapacity = 512;

dnnl_data_type_t DnnlType(DType t) { return t == DType::kBF16 ? dnnl_bf16 : dnnl_f32; }

// Everything that shapes a primitive.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, int, int, int, uint32_t,
                       uint32_t, bool, bool>;

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

Key KeyOf(const OneDnnProblem& p) {
  const GemmShape& s = p.shape;
  return Key{s.batch,
             s.m,
             s.n,
             s.k,
             s.trans_a,
             s.trans_b,
             static_cast<int>(p.ab),
             static_cast<int>(p.c),
             static_cast<int>(p.bias_dtype),
             Bits(p.alpha),
             Bits(p.beta),
             p.bias,
             p.gelu};
}

// A created primitive and its memory descriptors; immutable once made (oneDNN primitives may run
// on several threads at once).
struct Entry {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t a{}, b{}, c{}, bias{};
  std::string implementation;  // oneDNN's name for the kernel, e.g. "brg:avx512_core_bf16".
  ~Entry() {
    if (primitive != nullptr) LoadOneDnn().primitive_destroy(primitive);
  }
};

// Row-major [batch,] rows x cols, read transposed when `trans` (stored [cols, rows]).
absl::Status Describe(const OneDnn& d, const GemmShape& s, int64_t rows, int64_t cols, bool trans,
                      DType t, dnnl_memory_desc_t* md) {
  const int ndims = s.batch > 1 ? 3 : 2;
  dnnl_dims_t dims{}, strides{};
  const int r = ndims - 2;
  if (ndims == 3) {
    dims[0] = s.batch;
    strides[0] = rows * cols;
  }
  dims[r] = rows;
  dims[r + 1] = cols;
  strides[r] = trans ? 1 : cols;
  strides[r + 1] = trans ? rows : 1;
  if (d.memory_desc_init_by_strides(md, ndims, dims, DnnlType(t), strides) != dnnl_success) {
    return absl::InternalError("oneDNN: cannot describe a GEMM operand");
  }
  return absl::OkStatus();
}

// The attributes: alpha as the output scale, then GeLU or the sum with beta.
struct Attr {
  const OneDnn& d;
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t ops = nullptr;
  ~Attr() {
    if (ops != nullptr) d.post_ops_destroy(ops);
    if (attr != nullptr) d.attr_destroy(attr);
  }
};

absl::Status MakeAttr(const OneDnnProblem& p, Attr* out) {
  const OneDnn& d = out->d;
  bool ok =
      d.attr_create(&out->attr) == dnnl_success && d.post_ops_create(&out->ops) == dnnl_success;
  if (ok && p.alpha != 1.0f) {
    ok = d.attr_set_output_scales(out->attr, 1, 0, &p.alpha) == dnnl_success;
  }
  if (ok && p.gelu) {
    ok = d.post_ops_append_eltwise(out->ops, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f) ==
         dnnl_success;
  }
  if (ok && p.beta != 0.0f) ok = d.post_ops_append_sum(out->ops, p.beta) == dnnl_success;
  if (ok) ok = d.attr_set_post_ops(out->attr, out->ops) == dnnl_success;
  return ok ? absl::OkStatus() : absl::InternalError("oneDNN: cannot set the matmul attributes");
}

absl::StatusOr<std::unique_ptr<Entry>> Create(const OneDnn& d, const OneDnnProblem& p) {
  auto e = std::make_unique<Entry>();
  const GemmShape& s = p.shape;
  absl::Status st = Describe(d, s, s.m, s.k, s.trans_a, p.ab, &e->a);
  if (st.ok()) st = Describe(d, s, s.k, s.n, s.trans_b, p.ab, &e->b);
  if (st.ok()) st = Describe(d, s, s.m, s.n, false, p.c, &e->c);
  if (st.ok() && p.bias) {
    GemmShape row = s;
    row.batch = 1;
    st = Describe(d, row, 1, s.n, false, p.bias_dtype, &e->bias);
  }
  if (!st.ok()) return st;
  dnnl_matmul_desc_t desc;
  if (d.matmul_desc_init(&desc, &e->a, &e->b, p.bias ? &e->bias : nullptr, &e->c) != dnnl_success) {
    return absl::InternalError("oneDNN: cannot describe the matmul");
  }
  Attr attr{d};
  st = MakeAttr(p, &attr);
  if (!st.ok()) return st;
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t made = d.primitive_desc_create(&pd, &desc, attr.attr, d.engine, nullptr);
  if (made == dnnl_unimplemented) {
    return absl::UnimplementedError(
        absl::StrCat("oneDNN has no ", DTypeName(p.ab), " matmul kernel on this CPU"));
  }
  if (made != dnnl_success) return absl::InternalError("oneDNN: cannot create the matmul");
  const char* impl = nullptr;
  if (d.primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
      impl != nullptr) {
    e->implementation = impl;
  }
  const dnnl_status_t created = d.primitive_create(&e->primitive, pd);
  d.primitive_desc_destroy(pd);
  if (created != dnnl_success) return absl::InternalError("oneDNN: cannot create the primitive");
  return e;
}

struct Cache {
  std::mutex mu;
  absl::flat_hash_map<Key, std::shared_ptr<const Entry>> entries;
};

Cache& TheCache() {
  static Cache* const cache = new Cache;  // Never destroyed (GEMMs in static destructors).
  return *cache;
}

absl::StatusOr<std::shared_ptr<const Entry>> Lookup(const OneDnn& d, const OneDnnProblem& p) {
  Cache& cache = TheCache();
  const Key key = KeyOf(p);
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto it = cache.entries.find(key); it != cache.entries.end()) return it->second;
  }
  auto made = Create(d, p);  // Outside the lock: creating a primitive compiles a kernel.
  if (!made.ok()) return made.status();
  std::shared_ptr<const Entry> entry = std::move(*made);
  std::lock_guard<std::mutex> lock(cache.mu);
  if (cache.entries.size() >= kCacheCapacity) cache.entries.clear();
  return cache.entries.try_emplace(key, std::move(entry)).first->second;
}

// A stream per thread (a stream is not to be shared by threads running at once).
dnnl_stream_t ThreadStream(const OneDnn& d) {
  struct Holder {
    dnnl_stream_t stream = nullptr;
    ~Holder() {
      if (stream != nullptr) LoadOneDnn().stream_destroy(stream);
    }
  };
  thread_local Holder holder;
  if (holder.stream == nullptr) {
    if (d.stream_create(&holder.stream, d.engine, dnnl_stream_default_flags) != dnnl_success) {
      holder.stream = nullptr;
    }
  }
  return holder.stream;
}

absl::Status Execute(const OneDnn& d, const Entry& e, bool with_bias, int num_threads,
                     const void* a, const void* b, void* c, const void* bias) {
  dnnl_stream_t stream = ThreadStream(d);
  if (stream == nullptr) return absl::InternalError("oneDNN: cannot create a stream");
  dnnl_memory_t mem[4] = {nullptr, nullptr, nullptr, nullptr};
  const dnnl_memory_desc_t* mds[4] = {&e.a, &e.b, &e.c, &e.bias};
  void* handles[4] = {const_cast<void*>(a), const_cast<void*>(b), c, const_cast<void*>(bias)};
  const int args_n = with_bias ? 4 : 3;
  bool ok = true;
  for (int i = 0; i < args_n && ok; ++i) {
    ok = d.memory_create(&mem[i], mds[i], d.engine, handles[i]) == dnnl_success;
  }
  if (ok) {
    const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]},
                                     {DNNL_ARG_WEIGHTS, mem[1]},
                                     {DNNL_ARG_DST, mem[2]},
                                     {DNNL_ARG_BIAS, mem[3]}};
    d.set_num_threads(num_threads);
    ++t_onednn_calls;
    ok = d.primitive_execute(e.primitive, stream, args_n, args) == dnnl_success &&
         d.stream_wait(stream) == dnnl_success;
    --t_onednn_calls;
  }
  for (dnnl_memory_t m : mem) {
    if (m != nullptr) d.memory_destroy(m);
  }
  return ok ? absl::OkStatus() : absl::InternalError("oneDNN: the matmul failed");
}

}  // namespace

absl::Status OneDnnMatmul(const OneDnnProblem& p, int num_threads, const void* a, const void* b,
                          void* c, const void* bias) {
  const OneDnn& d = LoadOneDnn();
  if (!d.status.ok()) return d.status;
  auto entry = Lookup(d, p);
  if (!entry.ok()) return entry.status();
  return Execute(d, **entry, p.bias, num_threads, a, b, c, bias);
}

namespace {

// The probe: a small bf16 product's primitive, created or refused.
absl::StatusOr<std::shared_ptr<const Entry>> ProbeBf16(DType c) {
  const OneDnn& d = LoadOneDnn();
  if (!d.status.ok()) return d.status;
  OneDnnProblem p;
  p.shape.m = p.shape.n = p.shape.k = 64;
  p.ab = DType::kBF16;
  p.c = c;
  return Lookup(d, p);
}

}  // namespace

bool OneDnnHasBf16Kernel(DType c) {
  static const bool f32 = ProbeBf16(DType::kF32).ok();
  static const bool bf16 = ProbeBf16(DType::kBF16).ok();
  return c == DType::kBF16 ? bf16 : f32;
}

const char* OneDnnBf16Implementation() {
  static const std::string* const impl = [] {
    auto probe = ProbeBf16(DType::kBF16);
    if (!probe.ok()) return new std::string(probe.status().message());
    return new std::string((*probe)->implementation);
  }();
  return impl->c_str();
}

}  // namespace internal

int OneDnnCallsOnThisThread() { return internal::t_onednn_calls; }

}  // namespace ops
}  // namespace mt
