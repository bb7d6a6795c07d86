"""Repository rule that finds the CUDA toolkit, or stands in for it when there is none.

The toolkit is taken from $CUDA_PATH, else /usr/local/cuda. When it is found, @local_cuda holds
the headers and libraries (cudart static, NCCL; cuBLAS and cuBLASLt are opened at run time by
//core/cuda:cublas_loader) and defs.bzl says CUDA_FOUND = True with the nvcc path and the
libraries' folder (CUDA_LIB_DIR). When it is not, the targets exist but are empty and
CUDA_FOUND = False, so the whole tree builds CPU-only without any flag.
"""

_FOUND_BUILD = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    # include/nv/ holds extensionless headers (nv/target) that cuda_fp16.h, and so nccl.h, include.
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/nv/**"]),
    includes = ["include"],
)

cc_library(
    name = "cudart",
    srcs = ["lib64/libcudart_static.a"],
    linkopts = ["-ldl", "-lrt", "-lpthread"],
    deps = [":cuda_headers"],
)


cc_library(
    name = "nccl",
    srcs = ["lib64/libnccl.so"],
    deps = [":cudart"],
)
"""

_MISSING_BUILD = """
package(default_visibility = ["//visibility:public"])

# No CUDA toolkit was found: empty stand-ins so that CPU-only builds resolve every label.
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "nccl")
"""

def _cuda_configure_impl(rctx):
    cuda_path = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    root = rctx.path(cuda_path)
    found = (rctx.path(cuda_path + "/bin/nvcc").exists and
             rctx.path(cuda_path + "/include/cuda_runtime.h").exists and
             rctx.path(cuda_path + "/lib64/libcudart_static.a").exists)
    if found:
        rctx.symlink(cuda_path + "/include", "include")
        rctx.symlink(cuda_path + "/lib64", "lib64")
        rctx.file("BUILD", _FOUND_BUILD)
        rctx.file("defs.bzl", "CUDA_FOUND = True\nNVCC = \"%s/bin/nvcc\"\nCUDA_LIB_DIR = \"%s/lib64\"\n" %
                               (str(root.realpath), str(root.realpath)))
    else:
        rctx.file("BUILD", _MISSING_BUILD)
        rctx.file("defs.bzl", "CUDA_FOUND = False\nNVCC = \"\"\nCUDA_LIB_DIR = \"\"\n")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
