#!/bin/bash
# When one rank fails, the whole mpirun job must end non-zero within 30 s instead of hanging in a
# collective, leaving no process behind. Runs failure_probe (see its header) under mpi_test.sh for each failure mode, with a
# 60 s hard limit per job, and checks the exit code and the elapsed time.
#   failure_test.sh MPI_TEST_SH FAILURE_PROBE
set -uo pipefail
launcher="$1"
probe="$2"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}"
failed=0

run() {  # run NP MODE EXPECT(zero|nonzero) [PROBE ARGS...]
  local np="$1" mode="$2" expect="$3" log="$out/failure_${1}_${2}_${4:-}.log"
  shift 3
  local start end ms rc marker="--marker=failure_test_$$_${RANDOM}"
  start=$(date +%s%N)
  "$launcher" "$np" 60 "$probe" --mode="$mode" "$@" "$marker" >"$log" 2>&1
  rc=$?
  if pgrep -f -- "$marker" >/dev/null; then
    echo "FAIL: processes of the job are left behind:"; pgrep -fa -- "$marker"; failed=1
    pgrep -f -- "$marker" | xargs -r kill -KILL
  fi
  end=$(date +%s%N)
  ms=$(( (end - start) / 1000000 ))
  echo "np=$np mode=$mode $*: exit code $rc after ${ms} ms"
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
  if [[ -n "${want:-}" ]]; then
    # One line names the failure; the abort fallback's own line ("not delivered") may follow when
    # a loaded machine takes longer than its grace to kill the rank, and must with
    # --abort_never_returns.
    if [[ $rc -ne 75 ]] || [[ $(grep "watchdog: " "$log" | grep -vc "was not delivered") -ne 1 ]] ||
      ! grep -q -- "$want" "$log"; then
      echo "FAIL: expected exit code 75 and one watchdog line with '$want'"; cat "$log"; failed=1
    fi
  fi
}

run 4 none zero
run 4 kill nonzero
run 4 exit nonzero
run 4 status nonzero
run 2 kill nonzero
# The watchdog (comm/watchdog.h, 3 s): a stopped rank is named by its silence, a live rank that
# never joins the collective as the one outside any call; a clean run says goodbye and exits 0.
run 4 none zero --watchdog=3
want="rank 1 has sent no heartbeat" run 2 stop nonzero --watchdog=3 --victim=1
want="rank 0 has sent no heartbeat" run 4 stop nonzero --watchdog=3 --victim=0
want="rank 3 has sent no heartbeat" run 4 stop nonzero --watchdog=3 --victim=3
want="not in any communicator call (busy or stuck elsewhere): rank 2 " \
  run 3 stuck nonzero --watchdog=3 --victim=2
# An abort that cannot be delivered (MPI_Abort never returns, as on a node cut off from mpirun):
# the detecting rank ends itself after the grace, saying so, and the job still ends with 75.
want="the abort was not delivered within 2 s" run 2 stop nonzero --watchdog=3 --victim=1 \
  --abort_never_returns
exit $failed
