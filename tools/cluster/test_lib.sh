# What a test on the cluster sources after tools/test_env.sh:
#   source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/test_lib.sh" ID
# Sets $cluster (cluster.sh's path) and $id (ID, the cluster this test owns); prints SKIP and
# exits 0 where no cluster can be made (not root, no namespaces); removes cluster ID and $work at
# exit, also on failure (a test that starts more, e.g. Slurm, replaces the trap); and lets
# OpenMPI's shared memory go to each node's own /dev/shm (test_env.sh points it at $work, which
# every node sees). The test brings the cluster up itself.
cluster="${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/cluster.sh"
if ! why=$("$cluster" check); then
  echo "SKIP: no test cluster here: $why"
  exit 0
fi
id="$1"
trap '"$cluster" down --id $id; rm -rf "$work"' EXIT
unset OMPI_MCA_btl_vader_backing_directory
