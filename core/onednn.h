// oneDNN (Debian's libdnnl2, 2.6), loaded on first use: the GEMM backend for bf16 on CPUs with
// bf16 instructions (core/ops/gemm.h).
//
// Why dlopen and not a link: a binary must start where the library is missing (the GPU machine
// that runs tools/gpu_check.sh's bundle has no Debian packages), and only a GEMM that asks for
// oneDNN should then fail, with a message that says so. The library is loaded by the first call of
// LoadOneDnn(), never at start-up.
//
// Threads: Debian's oneDNN runs its kernels on OpenMP (libgomp), which it brings along; nothing
// else in this project uses OpenMP, so libgomp enters the process with it. libgomp reads
// OMP_WAIT_POLICY once, when it is loaded; LoadOneDnn() sets it to "passive" for that moment
// (unless the user set it: theirs wins), so that oneDNN's idle threads sleep at once after each
// call instead of spinning on the cores the rank's own thread pool and OpenBLAS use next. The GEMM
// sets OpenMP's thread count to the rank's threads before every call (set_num_threads). The
// variable is removed again after loading, so child processes decide for themselves.
//
// Process-wide singleton (the library and OpenMP's settings are process-wide). Thread-safe.
#ifndef MT_CORE_ONEDNN_H_
#define MT_CORE_ONEDNN_H_

#include <dnnl.h>

#include <string>

#include "absl/status/status.h"

namespace mt {

// The C API functions the GEMM uses, resolved from libdnnl.so.2; set iff status is OK.
struct OneDnn {
  absl::Status status;  // FailedPrecondition naming the dlopen/dlsym error when it did not load.

  decltype(&dnnl_engine_create) engine_create = nullptr;
  decltype(&dnnl_stream_create) stream_create = nullptr;
  decltype(&dnnl_stream_wait) stream_wait = nullptr;
  decltype(&dnnl_stream_destroy) stream_destroy = nullptr;
  decltype(&dnnl_memory_desc_init_by_strides) memory_desc_init_by_strides = nullptr;
  decltype(&dnnl_memory_create) memory_create = nullptr;
  decltype(&dnnl_memory_destroy) memory_destroy = nullptr;
  decltype(&dnnl_matmul_desc_init) matmul_desc_init = nullptr;
  decltype(&dnnl_primitive_attr_create) attr_create = nullptr;
  decltype(&dnnl_primitive_attr_destroy) attr_destroy = nullptr;
  decltype(&dnnl_primitive_attr_set_output_scales) attr_set_output_scales = nullptr;
  decltype(&dnnl_primitive_attr_set_post_ops) attr_set_post_ops = nullptr;
  decltype(&dnnl_post_ops_create) post_ops_create = nullptr;
  decltype(&dnnl_post_ops_destroy) post_ops_destroy = nullptr;
  decltype(&dnnl_post_ops_append_sum) post_ops_append_sum = nullptr;
  decltype(&dnnl_post_ops_append_eltwise) post_ops_append_eltwise = nullptr;
  decltype(&dnnl_primitive_desc_create) primitive_desc_create = nullptr;
  decltype(&dnnl_primitive_desc_query) primitive_desc_query = nullptr;
  decltype(&dnnl_primitive_desc_destroy) primitive_desc_destroy = nullptr;
  decltype(&dnnl_primitive_create) primitive_create = nullptr;
  decltype(&dnnl_primitive_execute) primitive_execute = nullptr;
  decltype(&dnnl_primitive_destroy) primitive_destroy = nullptr;
  void (*set_num_threads)(int) = nullptr;  // libgomp's omp_set_num_threads (per calling thread).

  dnnl_engine_t engine = nullptr;  // The CPU engine, created once.
  std::string version;             // "oneDNN 2.6.3".
  std::string isa;  // The widest ISA oneDNN will use, e.g. "avx2", "avx512_core_bf16".
  bool isa_capped_by_user = false;  // ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) was set.
};

// Loads libdnnl.so.2 on the first call, as described above.
const OneDnn& LoadOneDnn();

// One line for logs: "oneDNN 2.6.3, ISA avx2" (", capped by ONEDNN_MAX_CPU_ISA" when the user
// set it), or "oneDNN not loaded: <why>".
std::string DescribeOneDnn(const OneDnn& dnn);

}  // namespace mt

#endif  // MT_CORE_ONEDNN_H_
