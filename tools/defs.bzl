"""Build wrappers: the one place that sets compiler options for the project's own code.

mt_cc_library / mt_cc_binary / mt_cc_test inject the project's warnings (as errors) and language
level; mt_cuda_library compiles .cu files with nvcc into a static archive that a cc_library can
depend on (under --config=cuda_emu: as host C++ against the CUDA emulator in core/cuda/emu), and
builds its stub sources instead when CUDA is absent or --config=cpu_only is set.
"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "NVCC")

MT_COPTS = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
] + select({
    # clang (--config=fuzz) has no such option.
    "//tools/fuzz:fuzzing": [],
    # GCC 12's -O2 vectorises only loops its "very cheap" model accepts; the dynamic model lets
    # kernel loops with runtime trip counts vectorise too (no reassociation: results unchanged).
    "//conditions:default": ["-fvect-cost-model=dynamic"],
})

# GPU architectures: SASS for A100 (sm_80) and H100/H200 (sm_90), plus PTX for newer cards.
CUDA_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=[sm_90,compute_90]",
]

def if_cuda(if_true, if_false = []):
    """`if_true` in CUDA builds (toolkit found, no --config=cpu_only), else `if_false`.

    The CUDA emulator (--config=cuda_emu) counts as CUDA: the CUDA host code is built and runs
    against //core/cuda/emu, which stands in for libcudart and cuBLAS(Lt).
    """
    if not CUDA_FOUND:
        return if_false
    return select({
        "//third_party/cuda:cpu_only": if_false,
        "//conditions:default": if_true,
    })

def if_nccl(if_true, if_false = []):
    """`if_true` in CUDA builds that link NCCL: not under cpu_only, nor the emulator."""
    if not CUDA_FOUND:
        return if_false
    return select({
        "//third_party/cuda:cpu_only": if_false,
        "//third_party/cuda:emu": if_false,
        "//conditions:default": if_true,
    })

# The CUDA runtime and cuBLAS(Lt) for CUDA host code: the toolkit's, or the emulator's.
CUDART = "//third_party/cuda:cudart"
CUBLAS = "//third_party/cuda:cublas"

def mt_cc_library(name, copts = [], linkstatic = True, **kwargs):
    """A C++ library of the project. Static only (linkstatic): every binary links our libraries
    statically (.bazelrc, --dynamic_mode=off), and `bazel build //...` would otherwise also link a
    shared library of each one that nothing uses (the largest took 100 s in a cold build).
    """
    native.cc_library(name = name, copts = MT_COPTS + copts, linkstatic = linkstatic, **kwargs)

def mt_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = MT_COPTS + copts, **kwargs)

def mt_cc_test(name, copts = [], deps = [], size = "small", **kwargs):
    """A GoogleTest test. Every test states its size (and so its timeout)."""
    native.cc_test(
        name = name,
        copts = MT_COPTS + copts,
        deps = deps + ["@gtest//:gtest_main"],
        size = size,
        **kwargs
    )

# Seconds before comm/mpi_test.sh counts a job as hung, under Bazel's timeout for each size.
_MPI_HANG_SECONDS = {"small": 50, "medium": 240, "large": 800}

def mt_mpi_test(name, ranks, binary = None, size = "medium", hang_seconds = None, args = [],
                cpus = None, tags = [], **kwargs):
    """`binary` (default ":NAME_bin") under mpirun through comm/mpi_test.sh, one sh_test per entry
    of `ranks`, named NAME_npN.

    hang_seconds: when mpi_test.sh kills the job as hung (default: below Bazel's timeout for
    `size`); args: given to every rank after the binary; cpus: the cpu:N tag (default: min(N, 2)
    for small tests, 2 otherwise; 0: none); tags: added after it.
    """
    binary = binary or ":%s_bin" % name
    for np in ranks:
        cpu = cpus if cpus != None else (min(np, 2) if size == "small" else 2)
        native.sh_test(
            name = "%s_np%d" % (name, np),
            size = size,
            srcs = ["//comm:mpi_test.sh"],
            args = [
                str(np),
                str(hang_seconds or _MPI_HANG_SECONDS[size]),
                "$(location %s)" % binary,
            ] + args,
            data = [binary],
            tags = (["cpu:%d" % cpu] if cpu else []) + tags,
            **kwargs
        )

def mt_sh_test(name, srcs, binaries, size = "small", data = [], **kwargs):
    """A shell test given the paths of `binaries` as its arguments, in order (they are its data).

    Its data also holds //tools:test_env.sh, the environment such a test sources first.
    """
    native.sh_test(
        name = name,
        srcs = srcs,
        args = ["$(location %s)" % b for b in binaries],
        data = sorted(binaries) + ["//tools:test_env.sh"] + data,
        size = size,
        **kwargs
    )

def mt_fuzz_test(name, srcs, deps = [], size = "small", **kwargs):
    """A fuzz target: `srcs` define LLVMFuzzerTestOneInput; seeds in testdata/fuzz/<name>/.

    In the default build it is an ordinary test linked with //tools/fuzz:regression_driver, which
    runs every seed and then a few thousand inputs mutated from them (bounded to seconds); under
    --config=fuzz it is a libFuzzer binary (run on the seeds as a test, or for as long as wanted
    with tools/fuzz.sh).
    """
    seeds = native.glob(["testdata/fuzz/%s/*" % name])
    native.cc_test(
        name = name,
        srcs = srcs,
        copts = MT_COPTS,
        deps = deps + select({
            "//tools/fuzz:fuzzing": [],
            "//conditions:default": ["//tools/fuzz:regression_driver"],
        }),
        linkopts = select({
            "//tools/fuzz:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        data = seeds,
        args = ["$(location %s)" % s for s in seeds],
        size = size,
        tags = kwargs.pop("tags", []) + ["fuzz"],
        **kwargs
    )

def _cuda_archive_impl(ctx):
    cc_infos = [d[CcInfo] for d in ctx.attr.deps if CcInfo in d]
    headers = depset(ctx.files.hdrs, transitive = [c.compilation_context.headers for c in cc_infos])
    flags = ["-I."]
    for c in cc_infos:
        cc = c.compilation_context
        flags += ["-I" + p for p in cc.includes.to_list() + cc.quote_includes.to_list()]
        flags += ["-isystem " + p for p in cc.system_includes.to_list()]
        flags += ["-D" + d for d in cc.defines.to_list()]
    flags += [
        "-I" + ctx.bin_dir.path,
        "-std=c++17",
        "-O3",
        "--expt-relaxed-constexpr",
        "-Xcompiler=-fPIC",
        "-Xcompiler=-Wall",
        "-Werror=all-warnings",
    ] + CUDA_GENCODE + ctx.attr.nvcc_flags
    objs = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_nvcc/%s/%s.o" % (ctx.label.name, src.basename))
        ctx.actions.run_shell(
            command = "%s %s -c %s -o %s" % (NVCC, " ".join(flags), src.path, obj.path),
            inputs = depset([src], transitive = [headers]),
            outputs = [obj],
            mnemonic = "Nvcc",
            progress_message = "Compiling CUDA %s" % src.short_path,
            use_default_shell_env = True,
        )
        objs.append(obj)
    # ".lo": an always-link archive. Bazel puts a cc_library's precompiled archives on the link
    # line before its own objects, so a plain ".a" would be scanned before the host code (cc_srcs)
    # that calls its launchers, leaving them undefined.
    archive = ctx.actions.declare_file("_nvcc/lib%s.lo" % ctx.label.name)
    ctx.actions.run_shell(
        command = "rm -f %s && ar rcs %s %s" % (archive.path, archive.path, " ".join([o.path for o in objs])),
        inputs = objs,
        outputs = [archive],
        mnemonic = "NvccArchive",
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([archive]))]

cuda_archive = rule(
    implementation = _cuda_archive_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "nvcc_flags": attr.string_list(),
    },
    doc = "Compiles .cu files with nvcc (position-independent) into one static archive.",
)

def _static_archive_impl(ctx):
    lib = ctx.attr.library
    files = []
    for linker_input in lib[CcInfo].linking_context.linker_inputs.to_list():
        if linker_input.owner != lib.label:
            continue
        for library in linker_input.libraries:
            archive = library.pic_static_library or library.static_library
            if archive != None:
                files.append(archive)
    if len(files) != 1:
        fail("%s: expected one static archive of %s's own objects, found %d" %
             (ctx.label, lib.label, len(files)))
    return [DefaultInfo(files = depset(files))]

static_archive = rule(
    implementation = _static_archive_impl,
    attrs = {"library": attr.label(providers = [CcInfo], mandatory = True)},
    doc = """The static archive of a cc_library's own objects (".lo" when it is alwayslink), as a
file for another library's srcs: its objects linked without its headers and dependencies
reaching the dependents' compile actions.""",
)

def mt_cuda_library(name, srcs = [], hdrs = [], deps = [], cc_srcs = [], stub_srcs = [], copts = [],
                    **kwargs):
    """CUDA kernels (srcs, .cu via nvcc) plus host code (cc_srcs, via the C++ toolchain).

    Without a CUDA toolkit, or under --config=cpu_only, the library is built from stub_srcs
    instead (C++ defining the same entry points, which report that the CUDA backend is absent), so
    that callers link in every build with no #if. Dependents see the same headers and defines in
    every build.
    """
    if not CUDA_FOUND:
        native.cc_library(
            name = name,
            hdrs = hdrs,
            srcs = stub_srcs,
            copts = MT_COPTS + copts,
            deps = deps,
            alwayslink = 1,
            linkstatic = 1,
            **kwargs
        )
        return

    # Under the emulator each .cu file is compiled as host C++ (kernel_util.cuh then includes
    # core/cuda/emu/emu.h), from a copy named .cc, and linked as an archive file (static_archive),
    # as nvcc's objects are in the default build: the emulator's headers never reach the compile
    # actions of the libraries above, which therefore stay cached across the two builds.
    emu_srcs = []
    for src in srcs:
        stem = src[:-len(".cu")]
        native.genrule(
            name = name + "_emu_" + stem,
            srcs = [src],
            outs = ["_emu/%s_emu.cc" % stem],
            cmd = "cp $< $@",
            tags = ["manual"],  # built only through the emulator's select below
        )
        emu_srcs.append(":_emu/%s_emu.cc" % stem)
    native.cc_library(
        name = name + "_emu_kernels",
        srcs = emu_srcs,
        hdrs = hdrs,
        copts = MT_COPTS + copts + [
            "-DMT_CUDA_EMULATION=1",
            "-ffp-contract=off",  # __fmul_rn etc. and no fusing nvcc was told not to do
            "-Wno-unknown-pragmas",  # #pragma unroll
        ],
        deps = deps + ["//core/cuda/emu:cudart"],
        alwayslink = 1,
        linkstatic = 1,
        tags = ["manual"],
        testonly = kwargs.get("testonly", False),
    )
    static_archive(
        name = name + "_emu_archive",
        library = ":" + name + "_emu_kernels",
        tags = ["manual"],
        testonly = kwargs.get("testonly", False),
    )
    cuda_archive(
        name = name + "_kernels",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_headers"],
    )
    native.cc_library(
        name = name,
        hdrs = hdrs,
        srcs = select({
            "//third_party/cuda:cpu_only": stub_srcs,
            "//third_party/cuda:emu": [":" + name + "_emu_archive"] + cc_srcs,
            "//conditions:default": [":" + name + "_kernels"] + cc_srcs,
        }),
        copts = MT_COPTS + copts,
        deps = deps + select({
            "//third_party/cuda:cpu_only": [],
            "//conditions:default": [CUDART, CUBLAS],
        }),
        alwayslink = 1,
        linkstatic = 1,
        **kwargs
    )
