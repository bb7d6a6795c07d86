#!/bin/bash
# When one rank fails, the whole mpirun job must end non-zero within 30 s instead of hanging in a
# collective. Runs failure_probe (see its header) under mpi_test.sh for each failure mode, with a
# 60 s hard limit per job, and checks the exit code and the elapsed time.
#   failure_test.sh MPI_TEST_SH FAILURE_PROBE
set -uo pipefail
launcher="$1"
probe="$2"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}"
failed=0

run() {  # run NP MODE EXPECT(zero|nonzero)
  local np="$1" mode="$2" expect="$3" log="$out/failure_${1}_${2}.log"
  local start end ms rc
  start=$(date +%s%N)
  "$launcher" "$np" 60 "$probe" --mode="$mode" >"$log" 2>&1
  rc=$?
  end=$(date +%s%N)
  ms=$(( (end - start) / 1000000 ))
  echo "np=$np mode=$mode: exit code $rc after ${ms} ms"
  if grep -q UNEXPECTED "$log"; then
    echo "FAIL: a surviving rank completed a collective without rank 1"; failed=1
  fi
  if [[ "$expect" == zero ]]; then
    if [[ $rc -ne 0 ]]; then echo "FAIL: the control job should succeed"; cat "$log"; failed=1; fi
    return
  fi
  if [[ $rc -eq 0 ]]; then echo "FAIL: the job exited 0"; cat "$log"; failed=1; fi
  if [[ $rc -eq 124 ]]; then echo "FAIL: the job hung until the 60 s limit"; cat "$log"; failed=1; fi
  if [[ $ms -ge 30000 ]]; then echo "FAIL: the job took ${ms} ms (limit 30000)"; failed=1; fi
  if [[ "$mode" == status ]] && ! grep -q "\[rank 1\] fatal: INVALID_ARGUMENT" "$log"; then
    echo "FAIL: rank 1's error status was not reported"; cat "$log"; failed=1
  fi
}

run 4 none zero
run 4 kill nonzero
run 4 exit nonzero
run 4 status nonzero
run 2 kill nonzero
exit $failed
