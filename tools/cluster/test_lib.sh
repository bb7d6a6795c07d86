# What a test on the cluster sources after tools/test_env.sh:
#   source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/test_lib.sh" ID
# Sets $cluster (cluster.sh's path) and $id (ID, the cluster this test owns); prints SKIP and
# exits 0 where no cluster can be made (not root, no namespaces); waits until no other test on this
# machine holds cluster ID (a lock file); removes cluster ID and $work at exit, also on failure or
# a signal (a test that starts more, e.g. Slurm, replaces the EXIT trap); and lets
# OpenMPI's shared memory go to each node's own /dev/shm (test_env.sh points it at $work, which
# every node sees). The test brings the cluster up itself.
cluster="${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/cluster.sh"
if ! why=$("$cluster" check); then
  echo "SKIP: no test cluster here: $why"
  exit 0
fi
[[ "${1:-}" =~ ^[0-9]+$ && "$1" -le 255 ]] || fail "test_lib.sh: a cluster id 0-255, not '${1:-}'"
id="$1"
# One user of cluster ID at a time on this machine, whichever Bazel (or person) runs the test.
exec 9>"/tmp/mt_cluster.$id.lock"
flock -w 600 9 || fail "cluster $id: busy for 600 s (/tmp/mt_cluster.$id.lock)"
trap '"$cluster" down --id $id; rm -rf "$work"' EXIT
# A test ended by a signal (Bazel's timeout, Ctrl-C) still removes what it made: the EXIT trap
# runs on the way out.
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP
unset OMPI_MCA_btl_vader_backing_directory
