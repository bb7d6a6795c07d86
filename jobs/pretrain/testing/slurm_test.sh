#!/bin/bash
# Slurm launches on the test cluster (tools/cluster/cluster.sh + tools/cluster/slurm.sh) train
# exactly as mpirun does: a TP=2 x DP=2 GPT job, 4 ranks on 2 nodes (ranks 0-1 on node1), gives
# the same losses and gradient norms to the last printed digit under
#   - cluster.sh mpirun -H node1:2,node2:2 (the reference);
#   - srun --mpi=pmix (direct launch: Slurm's PMIx server, OpenMPI's PMIx client);
#   - srun --mpi=pmi2, only where OpenMPI has a PMI-2 client (Debian's has not: it is built
#     with PMIx only, so a pmi2 launch aborts in MPI_Init; reported and skipped);
#   - mpirun inside salloc, and inside sbatch (OpenMPI's ras/plm slurm: it reads the allocation
#     and starts its daemons through srun), plus srun --mpi=pmix inside the sbatch job;
# and each rank's Slurm environment is what the mapping says (SLURM_PROCID = PMIx rank,
# SLURM_LOCALID = local rank, ranks 0-1 on node1), with the MPI rank of each training process
# equal to its Slurm task id (srun --label).
# Needs root, the cluster and Debian's munge, slurmctld, slurmd and slurm-client; prints SKIP
# and passes where any is missing.
#   slurm_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN
set -uo pipefail
corpus_bin="$(realpath "$1")"; pretrain="$(realpath "$2")"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_slurm || exit 1
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/test_lib.sh" 7
slurm="${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/slurm.sh"
if ! why=$("$slurm" check); then echo "SKIP: no Slurm here: $why"; exit 0; fi
trap '"$slurm" down --id $id; "$cluster" down --id $id; rm -rf "$work"' EXIT
t0=$SECONDS
lap() { echo "  [$((SECONDS - t0)) s] $*"; }
# What every launch passes to the ranks (srun and sbatch hand the whole environment on): shared
# memory inside a node, TCP on the cluster's subnet between nodes.
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include="198.18.$id.0/24"
export OMPI_MCA_oob_tcp_if_include="198.18.$id.0/24" OMPI_MCA_mpi_yield_when_idle=1

"$cluster" up --id $id --nodes 2 >/dev/null || fail "cluster up"
"$slurm" up --id $id >/dev/null || fail "slurm up"
lap "cluster and Slurm up: $("$slurm" sinfo --id $id -h -N -o '%N %T' | tr '\n' ' ')"

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=300 >/dev/null || fail corpus
job=("$pretrain" --data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
     --num_layers=2 --hidden_size=64 --num_attention_heads=4 --seq_length=32
     --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --log_interval=1 --eval_iters=0
     --threads=1 --train_iters=4 --tensor_model_parallel_size=2)
placement="0 0 node1|1 1 node1|2 0 node2|3 1 node2|"

# losses FILE: "ITERATION LOSS GRAD_NORM" per iteration (a --label prefix is ignored).
losses() {
  sed -n 's/.* iteration *\([0-9]*\)\/.*| lm loss: \([^ ]*\) .*| grad norm: \([^ ]*\) .*/\1 \2 \3/p' "$1"
}
# same NAME FILE: FILE's iterations equal the reference's, to the last printed digit.
same() {
  local got
  got=$(losses "$2")
  [[ $(echo "$got" | grep -c .) -eq 4 ]] || { cat "$2"; fail "$1: not 4 iterations"; }
  [[ "$got" == "$ref" ]] || fail "$1: losses differ from mpirun's:$(diff <(echo "$ref") <(echo "$got") | tr '\n' ' ')"
  echo "  $1: $(echo "$got" | awk '{printf "%s ", $2}')(identical)"
}

# 1. The reference: mpirun through the cluster's rsh agent.
timeout --foreground 120 "$cluster" mpirun --id $id -H node1:2,node2:2 -np 4 "${job[@]}" >"$work/mpirun.out" 2>&1 ||
  { cat "$work/mpirun.out"; fail "mpirun"; }
ref=$(losses "$work/mpirun.out")
[[ $(echo "$ref" | grep -c .) -eq 4 ]] || { cat "$work/mpirun.out"; fail "mpirun: not 4 iterations"; }
lap "mpirun (reference) lm loss: $(echo "$ref" | awk '{printf "%s ", $2}')"

# 2. srun --mpi=pmix: the Slurm environment, then training.
srun=(timeout --foreground 60 "$slurm" srun --id $id -N 2 --ntasks-per-node=2)
got=$("${srun[@]}" --mpi=pmix sh -c 'echo "$SLURM_PROCID $SLURM_LOCALID $(hostname) $PMIX_RANK"' |
  sort -n) || fail "srun --mpi=pmix: environment"
want=$(echo "$placement" | tr '|' '\n' | awk 'NF {print $0, $1}')
[[ "$got" == "$want" ]] || fail "srun --mpi=pmix: SLURM_PROCID SLURM_LOCALID host PMIX_RANK: $(echo $got)"
# known_crash FILE: the launch in FILE died of the intermittent segfault seen with Debian's
# OpenMPI 4.1.4 + PMIx 4.2.2 under srun --mpi=pmix: a rank calls through a null pointer (its
# backtrace is libc's frame alone) in MPI_Init or at exit, in 3 of 60 launches while this
# 2-core machine was busy and 0 of 130 while it was not (like open-mpi/ompi#10117). Retried once.
# Not ours: no frame of the training binary in the crash's backtrace ("[node:pid] [ 3] path(...)").
known_crash() {
  grep -q "Failing at address: (nil)" "$1" && ! grep -qE '\] \[ *[0-9]+\] .*pretrain_gpt' "$1"
}
pmix_run() {  # pmix_run OUT SRUN_ARGS...: srun --mpi=pmix, retried once after the known crash
  local out="$1"
  shift
  "${srun[@]}" --mpi=pmix "$@" >"$out" 2>&1 && return 0
  known_crash "$out" || return 1
  echo "  NOTE: srun --mpi=pmix: a rank segfaulted in OpenMPI/PMIx ($(grep -m1 'Signal:' "$out")); retrying once"
  "${srun[@]}" --mpi=pmix "$@" >"$out" 2>&1
}
pmix_run "$work/pmix.out" --label "${job[@]}" || { cat "$work/pmix.out"; fail "srun --mpi=pmix"; }
# "[Rank R]" comes from MPI rank R: its --label must be Slurm task R.
bad=$(sed -n 's/^ *\([0-9]*\): \[Rank \([0-9]*\)\].*/\1 \2/p' "$work/pmix.out" | awk '$1 != $2')
[[ -z "$bad" ]] || fail "srun --mpi=pmix: MPI rank differs from the Slurm task: $bad"
grep -q '^ *1: \[Rank 1\]' "$work/pmix.out" || fail "srun --mpi=pmix: no line from rank 1"
same "srun --mpi=pmix" "$work/pmix.out"
lap "srun --mpi=pmix"

# 3. srun --mpi=pmi2, where OpenMPI has Slurm's PMI-2 client (the s2 component).
if ompi_info --parsable 2>/dev/null | grep -q '^mca:pmix:s2:'; then
  "${srun[@]}" --mpi=pmi2 "${job[@]}" >"$work/pmi2.out" 2>&1 ||
    { cat "$work/pmi2.out"; fail "srun --mpi=pmi2"; }
  same "srun --mpi=pmi2" "$work/pmi2.out"
  lap "srun --mpi=pmi2"
else
  echo "  srun --mpi=pmi2: not run: this OpenMPI has no PMI-2 client (built --with-pmix only;" \
    "a pmi2 launch aborts in MPI_Init: 'OMPI was not built with SLURM's PMI support')"
fi

# 4. mpirun inside salloc: mpirun on the login node, its daemons started with srun.
cat >"$work/in_alloc.sh" <<EOF
#!/bin/bash
mpirun --bind-to none -np 4 sh -c 'echo "ENV \$OMPI_COMM_WORLD_RANK \$OMPI_COMM_WORLD_LOCAL_RANK \$(hostname)"' || exit 1
mpirun --bind-to none -np 4 ${job[*]}
EOF
chmod +x "$work/in_alloc.sh"
timeout --foreground 60 "$slurm" salloc --id $id -N 2 --ntasks-per-node=2 "$work/in_alloc.sh" \
  >"$work/salloc.out" 2>&1 || { cat "$work/salloc.out"; fail "mpirun in salloc"; }
got=$(sed -n 's/^ENV //p' "$work/salloc.out" | sort -n | tr '\n' '|')
[[ "$got" == "$placement" ]] || fail "mpirun in salloc: placement (rank local_rank host): $got"
same "mpirun in salloc" "$work/salloc.out"
lap "mpirun in salloc"

# 5. sbatch: the job script on node1 runs mpirun, then srun --mpi=pmix, in one allocation.
cat >"$work/batch.sh" <<EOF
#!/bin/bash
echo "BATCH \$(hostname) \$SLURM_JOB_NODELIST \$SLURM_TASKS_PER_NODE"
mpirun --bind-to none -np 4 ${job[*]} >"$work/sbatch_mpirun.out" 2>&1 || exit 1
srun --mpi=pmix ${job[*]} >"$work/sbatch_pmix.out" 2>&1 && exit 0
grep -q "Failing at address: (nil)" "$work/sbatch_pmix.out" || exit 2
grep -qE '\] \[ *[0-9]+\] .*pretrain_gpt' "$work/sbatch_pmix.out" && exit 2
echo "NOTE: srun --mpi=pmix in sbatch: a rank segfaulted in OpenMPI/PMIx; retrying once"
srun --mpi=pmix ${job[*]} >"$work/sbatch_pmix.out" 2>&1 || exit 2
EOF
jobid=$("$slurm" sbatch --id $id --parsable -N 2 --ntasks-per-node=2 -o "$work/sbatch.out" \
  "$work/batch.sh") || fail "sbatch"
state=""
deadline=$((SECONDS + 60))
while [[ $SECONDS -le $deadline ]]; do
  state=$("$slurm" scontrol --id $id show job "$jobid" -o | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  [[ -n "$state" && "$state" != PENDING && "$state" != RUNNING && "$state" != CONFIGURING &&
     "$state" != COMPLETING ]] && break
  sleep 0.2
done
[[ "$state" == COMPLETED ]] ||
  { cat "$work/sbatch.out" "$work"/sbatch_*.out 2>/dev/null; fail "sbatch job $jobid: ${state:-no state}"; }
grep -q "^BATCH node1 node\[1-2\] 2(x2)$" "$work/sbatch.out" || fail "sbatch: $(cat "$work/sbatch.out")"
same "mpirun in sbatch" "$work/sbatch_mpirun.out"
grep "^NOTE" "$work/sbatch.out" | sed 's/^/  /'
same "srun --mpi=pmix in sbatch" "$work/sbatch_pmix.out"
lap "sbatch"

echo "PASS ($((SECONDS - t0)) s)"
