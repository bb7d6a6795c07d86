"""A model variant as a self-contained Bazel package.

    load("//models:variant.bzl", "mt_model_variant")
    mt_model_variant(
        name = "modern_decoder",
        family = "gpt",
        srcs = ["modern_decoder.cc"],   # registers an architecture (code) and named configs
        deps = ["//models/gpt2", "//nn:transformer"],
        architecture = "modern-decoder",
        test_model = "modern-decoder-tiny",
        all_reduces_per_layer = 2,
    )

makes, in the variant's package and with no edit anywhere else:
  - the alwayslink library `name` (what registers the variant);
  - the family's drivers, evaluation binaries and tools linked with it, so that
    `bazel run //models/variants/<pkg>:<tool> -- --model=NAME` runs the variant (the evaluation
    binaries take it from the checkpoint, which records the model):
      gpt family:  pretrain_gpt, describe, wikitext103, lambada, generate, serve,
                   reshard_checkpoint
      bert family: pretrain_bert, describe, race, reshard_checkpoint
    (they link the standard models too, //models:all);
  - for the gpt family, the tests every variant owes: tensor-parallel invariance at TP = 1, 2, 4
    with `all_reduces_per_layer` TP all-reduces per layer each way (tp_test_np1/2/4,
    //models/testing:variant_tp_test), and training through its own pretrain_gpt at TP=2 with a
    checkpoint that records `architecture` and resumes (driver_test,
    //models/testing:variant_driver_test.sh), resharding at TP 1 -> 2 -> 4 -> 1 with the same
    validation loss (reshard_test, //models/testing:reshard_model_test.sh), and the evaluation binaries on its checkpoint at
    TP = 1 and 2 (eval_test, //models/testing:variant_eval_test.sh), on a small version of
    `test_model`.
"""

load("//tools:defs.bzl", "mt_cc_binary", "mt_cc_library")

_TOOLS = {
    "bert": {
        "describe": "//models:describe_main",
        "pretrain_bert": "//jobs/pretrain:pretrain_bert_main",
        "race": "//jobs/eval:race_main",
        "reshard_checkpoint": "//checkpoint:reshard_checkpoint_main",
    },
    "gpt": {
        "describe": "//models:describe_main",
        "generate": "//jobs/serve:generate_main",
        "lambada": "//jobs/eval:lambada_main",
        "pretrain_gpt": "//jobs/pretrain:pretrain_gpt_main",
        "reshard_checkpoint": "//checkpoint:reshard_checkpoint_main",
        "serve": "//jobs/serve:serve_main",
        "wikitext103": "//jobs/eval:wikitext103_main",
    },
}

def _variant_tests(name, test_model, architecture, all_reduces_per_layer):
    native.genrule(
        name = name + "_tp_test_config",
        outs = [name + "_tp_test_config.cc"],
        cmd = ("printf 'namespace mt { namespace models { namespace testing {\\n" +
               "extern const char* const kVariantModel = \"%s\";\\n" +
               "extern const int kAllReducesPerLayer = %d;\\n}}}\\n' > $@") %
              (test_model, all_reduces_per_layer),
        testonly = True,
    )
    mt_cc_binary(
        name = "tp_test_bin",
        testonly = True,
        srcs = [":" + name + "_tp_test_config"],
        deps = [
            ":" + name,
            "//models/testing:variant_tp_test",
        ],
    )
    for np in [1, 2, 4]:
        native.sh_test(
            name = "tp_test_np%d" % np,
            size = "medium",
            srcs = ["//comm:mpi_test.sh"],
            args = [str(np), "240", "$(location :tp_test_bin)"],
            data = [":tp_test_bin"],
            tags = ["cpu:2"],
        )
    native.sh_test(
        name = "driver_test",
        size = "medium",
        srcs = ["//models/testing:variant_driver_test.sh"],
        args = [
            "$(location //data/testing:synthetic_corpus)",
            "$(location :describe)",
            "$(location :pretrain_gpt)",
            test_model,
            architecture,
        ],
        data = [
            ":describe",
            ":pretrain_gpt",
            "//data/testing:synthetic_corpus",
            "//tools:test_env.sh",
        ],
        tags = ["cpu:2"],
    )
    native.sh_test(
        name = "reshard_test",
        size = "medium",
        srcs = ["//models/testing:reshard_model_test.sh"],
        args = [
            "gpt",
            "$(location //data/testing:synthetic_corpus)",
            "$(location :pretrain_gpt)",
            "$(location :reshard_checkpoint)",
            "--model=" + test_model,
        ],
        data = [
            ":pretrain_gpt",
            ":reshard_checkpoint",
            "//data/testing:synthetic_corpus",
            "//tools:test_env.sh",
        ],
        tags = ["cpu:2"],
    )
    native.sh_test(
        name = "eval_test",
        size = "medium",
        srcs = ["//models/testing:variant_eval_test.sh"],
        args = [
            "$(location //data/testing:synthetic_corpus)",
            "$(location :pretrain_gpt)",
            "$(location :wikitext103)",
            "$(location :lambada)",
            "$(location :generate)",
            test_model,
            "$(location //eval:testdata/wiki_small.tokens)",
            "$(location //eval:testdata/lambada_small.jsonl)",
        ],
        data = [
            ":generate",
            ":lambada",
            ":pretrain_gpt",
            ":wikitext103",
            "//data/testing:synthetic_corpus",
            "//eval:testdata/lambada_small.jsonl",
            "//eval:testdata/wiki_small.tokens",
            "//tools:test_env.sh",
        ],
        tags = ["cpu:2"],
    )

def mt_model_variant(
        name,
        family,
        srcs,
        deps = [],
        architecture = None,
        test_model = None,
        all_reduces_per_layer = 2,
        visibility = None):
    """The variant's library, its family's tools linked with it, and its tests."""
    if family not in _TOOLS:
        fail("family must be one of %s, got %s" % (sorted(_TOOLS.keys()), family))
    mt_cc_library(
        name = name,
        srcs = srcs,
        deps = deps + ["//models:registry"],
        alwayslink = 1,
        visibility = visibility,
    )
    for tool, main in _TOOLS[family].items():
        mt_cc_binary(
            name = tool,
            deps = [
                ":" + name,
                "//models:all",
                main,
            ],
        )
    if family == "gpt":
        if not test_model or not architecture:
            fail("a gpt-family variant names its architecture and a test_model")
        _variant_tests(name, test_model, architecture, all_reduces_per_layer)
