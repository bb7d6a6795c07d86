#include "core/onednn.h"

#include <dlfcn.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt {
namespace {

constexpr char kLibrary[] = "libdnnl.so.2";
constexpr char kWaitPolicy[] = "OMP_WAIT_POLICY";

const char* IsaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

absl::Status Resolve(void* handle, const char* library, const char* name, void** out) {
  dlerror();
  *out = dlsym(handle, name);
  if (*out != nullptr) return absl::OkStatus();
  const char* error = dlerror();
  return absl::FailedPreconditionError(
      absl::StrCat(library, " has no ", name, ": ", error != nullptr ? error : "(no dlerror)"));
}

// The oneDNN functions, by name, and where each goes.
template <typename F>
std::pair<const char*, void**> Slot(const char* name, F* fn) {
  return {name, reinterpret_cast<void**>(fn)};
}

absl::Status ResolveAll(void* handle, OneDnn* d) {
  const std::pair<const char*, void**> symbols[] = {
      Slot("dnnl_engine_create", &d->engine_create),
      Slot("dnnl_stream_create", &d->stream_create),
      Slot("dnnl_stream_wait", &d->stream_wait),
      Slot("dnnl_stream_destroy", &d->stream_destroy),
      Slot("dnnl_memory_desc_init_by_strides", &d->memory_desc_init_by_strides),
      Slot("dnnl_memory_create", &d->memory_create),
      Slot("dnnl_memory_destroy", &d->memory_destroy),
      Slot("dnnl_matmul_desc_init", &d->matmul_desc_init),
      Slot("dnnl_primitive_attr_create", &d->attr_create),
      Slot("dnnl_primitive_attr_destroy", &d->attr_destroy),
      Slot("dnnl_primitive_attr_set_output_scales", &d->attr_set_output_scales),
      Slot("dnnl_primitive_attr_set_post_ops", &d->attr_set_post_ops),
      Slot("dnnl_post_ops_create", &d->post_ops_create),
      Slot("dnnl_post_ops_destroy", &d->post_ops_destroy),
      Slot("dnnl_post_ops_append_sum", &d->post_ops_append_sum),
      Slot("dnnl_post_ops_append_eltwise", &d->post_ops_append_eltwise),
      Slot("dnnl_primitive_desc_create", &d->primitive_desc_create),
      Slot("dnnl_primitive_desc_query", &d->primitive_desc_query),
      Slot("dnnl_primitive_desc_destroy", &d->primitive_desc_destroy),
      Slot("dnnl_primitive_create", &d->primitive_create),
      Slot("dnnl_primitive_execute", &d->primitive_execute),
      Slot("dnnl_primitive_destroy", &d->primitive_destroy),
  };
  for (const auto& [name, out] : symbols) {
    absl::Status s = Resolve(handle, kLibrary, name, out);
    if (!s.ok()) return s;
  }
  // libgomp came in with oneDNN (RTLD_LOCAL keeps it out of the global scope, so ask for it).
  void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (gomp == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        kLibrary, " did not bring libgomp.so.1 (an OpenMP build of oneDNN is needed)"));
  }
  return Resolve(gomp, "libgomp.so.1", "omp_set_num_threads",
                 reinterpret_cast<void**>(&d->set_num_threads));
}

void Load(OneDnn* d) {
  const bool set_policy = std::getenv(kWaitPolicy) == nullptr;
  if (set_policy) setenv(kWaitPolicy, "passive", /*overwrite=*/0);
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  const char* open_error = handle == nullptr ? dlerror() : nullptr;
  if (set_policy) unsetenv(kWaitPolicy);  // Ours, not the user's: never inherited.
  if (handle == nullptr) {
    d->status = absl::FailedPreconditionError(absl::StrCat(
        "cannot load ", kLibrary, ": ", open_error != nullptr ? open_error : "(no dlerror)",
        " (install libdnnl2, e.g. with tools/setup.sh)"));
    return;
  }
  d->status = ResolveAll(handle, d);
  if (!d->status.ok()) return;
  void *version = nullptr, *isa = nullptr;
  d->status = Resolve(handle, kLibrary, "dnnl_version", &version);
  if (d->status.ok()) d->status = Resolve(handle, kLibrary, "dnnl_get_effective_cpu_isa", &isa);
  if (!d->status.ok()) return;
  const dnnl_version_t* v = reinterpret_cast<const dnnl_version_t* (*)()>(version)();
  d->version = absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
  d->isa = IsaName(reinterpret_cast<dnnl_cpu_isa_t (*)()>(isa)());
  d->isa_capped_by_user =
      std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr || std::getenv("DNNL_MAX_CPU_ISA") != nullptr;
  if (d->engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success) {
    d->status = absl::InternalError(absl::StrCat(d->version, ": cannot create the CPU engine"));
  }
}

}  // namespace

const OneDnn& LoadOneDnn() {
  // Never destroyed: GEMMs may run in other static objects' destructors.
  static const OneDnn* const dnn = [] {
    auto* d = new OneDnn;
    Load(d);
    return d;
  }();
  return *dnn;
}

std::string DescribeOneDnn(const OneDnn& dnn) {
  if (!dnn.status.ok()) return absl::StrCat("oneDNN not loaded: ", dnn.status.message());
  return absl::StrCat(dnn.version, ", ISA ", dnn.isa,
                      dnn.isa_capped_by_user ? ", capped by ONEDNN_MAX_CPU_ISA" : "");
}

}  // namespace mt
