# The environment of a shell test that runs the project's binaries; sourced first thing:
#   source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" NAME || exit 1
# (from the runfiles under Bazel, where mt_sh_test puts it in the test's data; from the
# repository root when a test script is run by hand). It makes $work, a fresh directory
# /tmp/NAME.XXXXXX removed at exit, the TMPDIR of everything the test starts (a short path:
# OpenMPI's socket paths are limited to 108 bytes); lets mpirun run as root (CI containers); keeps
# OpenMPI's shared memory in $work (not /dev/shm: see comm/mpi_test.sh); unsets the variables
# through which a gtest binary the test starts would overwrite Bazel's own reports; under
# --config=asan, drops OpenMPI's own leaks as comm/mpi_test.sh does; and defines
#   fail MESSAGE...  "FAIL: MESSAGE" on stderr, exit 1;
#   mpi NP ARGS...   ARGS under mpirun with NP ranks on this machine, bounded by $mpi_timeout
#                    seconds (default 200): a hang fails the test (exit code 124);
#   sentences FILE DOCS SEED
#                    writes DOCS documents of 3-6 made-up sentences ("The cat sees the moon."),
#                    separated by blank lines: a small English text for the BERT tests, the same
#                    for the same SEED.
work="$(mktemp -d "/tmp/$1.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export TMPDIR="$work" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_backing_directory="$TMPDIR"
unset XML_OUTPUT_FILE GTEST_OUTPUT TEST_PREMATURE_EXIT_FILE
# Under --config=asan, as comm/mpi_test.sh: OpenMPI's memory kept until exit is dropped by
# lsan_suppressions.txt (next to this file's source), which needs the slow unwinder to see
# OpenMPI's frames, without LSan's table of the suppressions used (tests read the output of the
# binaries they run); leak detection stays on for our own code.
if [[ -n "${ASAN_OPTIONS:-}" ]]; then
  lsan_suppressions="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lsan_suppressions.txt"
  if [[ -f "$lsan_suppressions" ]]; then
    export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
    export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$lsan_suppressions:print_suppressions=0"
  fi
fi
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi() {
  local np="$1"
  shift
  timeout "${mpi_timeout:-200}" mpirun --oversubscribe --bind-to none -np "$np" \
    --mca btl self,vader --mca mpi_yield_when_idle 1 "$@"
}
sentences() {
  python3 - "$@" <<'PY'
import random, sys
path, docs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(seed)
who = ["the cat", "a dog", "my friend", "the old man", "our teacher", "the bird", "a child"]
does = ["sees", "likes", "finds", "watches", "follows", "helps", "calls"]
what = ["the ball", "a small house", "the river", "a green tree", "the red car", "the moon"]
with open(path, "w") as f:
    for _ in range(docs):
        n = random.randint(3, 6)
        f.write(" ".join("%s %s %s." % (random.choice(who).capitalize(), random.choice(does),
                                        random.choice(what)) for _ in range(n)) + "\n\n")
PY
}
