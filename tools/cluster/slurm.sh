#!/bin/bash
# A Slurm cluster on the test cluster of tools/cluster/cluster.sh: slurmctld on the login node,
# slurmd on every node and munged on each of them (one key; the socket in the node's own
# /dev/shm, so each node talks to its own munged as on a real cluster), all with their
# configuration, state, spool, logs and PIDs in /tmp/mt_cluster.<K>/slurm (nothing in /etc or
# /var; no systemd, no cgroups). Needs root and
# Debian's munge, slurmctld, slurmd and slurm-client.
#
#   tools/cluster/cluster.sh up --id K --nodes N
#   tools/cluster/slurm.sh up [--id K] [--cpus C]    # waits until sinfo shows every node idle
#   tools/cluster/slurm.sh srun [--id K] SRUN_ARGS...      # the client on the login node
#   tools/cluster/slurm.sh salloc [--id K] SALLOC_ARGS...  # (also sbatch, squeue, sinfo,
#   tools/cluster/slurm.sh sbatch [--id K] SBATCH_ARGS...  #  scancel, scontrol, sacct)
#   tools/cluster/slurm.sh env [--id K]              # the SLURM_CONF=... line for other clients
#   tools/cluster/slurm.sh down [--id K]             # stops the daemons, removes the state
#   tools/cluster/slurm.sh check                     # exit 0 if the daemons are installed
#
# C (default: this machine's CPU count) is each node's CPUs in slurm.conf; every node runs on
# the same machine, so C is a bookkeeping number (SlurmdParameters=config_overrides keeps a node
# whose real count differs from draining), and the partition lets jobs share CPUs
# (OverSubscribe=FORCE:4).
#
# Clients run inside the login node's namespaces, with SLURM_CONF pointing at this cluster's
# slurm.conf; srun passes its whole environment to the tasks (so OMPI_* settings travel), and
# the tasks start in the caller's directory (every node sees the same file system).
# Bounded waits: `up` gives the daemons MT_SLURM_UP_TIMEOUT seconds (default 30).
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # munged, slurmd, ip (a test's PATH may lack them)

die() {
  echo "slurm.sh: error: $*" >&2
  exit 1
}

id=0
names() {
  cdir="/tmp/mt_cluster.${id}"
  dir="$cdir/slurm"
  net="198.18.${id}"
  conf="$dir/etc/slurm.conf"
  # The same path in every node's namespace; each node's /dev/shm is its own (cluster.sh).
  msock="/dev/shm/mt_munge.${id}.socket"
}

holder_pid() {
  local f="$cdir/$1.pid"
  [[ -f "$f" ]] || die "no node '$1' in cluster $id (run tools/cluster/cluster.sh up --id $id first)"
  cat "$f"
}

why_not() {
  [[ $(id -u) -eq 0 ]] || { echo "needs root"; return; }
  local b
  for b in munged slurmctld slurmd srun sinfo; do
    command -v "$b" >/dev/null || { echo "$b is not installed (Debian: munge slurmctld slurmd slurm-client)"; return; }
  done
}

# in NODE CMD...: CMD inside NODE's network, UTS and mount namespaces, with this cluster's config.
in_node() {
  local pid
  pid=$(holder_pid "$1") || exit 1
  shift
  SLURM_CONF="$conf" nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$@"
}

# daemon NODE NAME CMD...: CMD (a daemon in its foreground mode) in the background inside NODE,
# in its own session; its PID (setsid and nsenter exec, so it is the daemon's) in
# $dir/pids/NAME, its output in $dir/log/NAME.out.
daemon() {
  local node="$1" name="$2" pid
  shift 2
  pid=$(holder_pid "$node") || exit 1
  SLURM_CONF="$conf" setsid nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$@" \
    </dev/null >>"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/pids/$name"
}

# Every process inside node NODE's network namespace whose command is in the list.
pids_named() {
  local ns="mtc${id}-$1" p
  shift
  for p in $(ip netns pids "$ns" 2>/dev/null); do
    local comm
    comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
    for c in "$@"; do [[ "$comm" == "$c" ]] && echo "$p"; done
  done
}

# fail MESSAGE: stops what `up` started, keeps its logs in $cdir/slurm-logs, and dies.
fail_up() {
  rm -rf "$cdir/slurm-logs"
  cp -r "$dir/log" "$cdir/slurm-logs" 2>/dev/null
  cmd_down
  die "$* (logs: $cdir/slurm-logs)"
}

# kill_ours SIGNAL PID_FILE: signals the daemon whose PID the file holds, only if that process is
# still inside one of this cluster's namespaces (a PID file can outlive its process, and the PID be
# reused by another). Returns 1 when there is no such process.
kill_ours() {
  local pid ns
  pid=$(cat "$2" 2>/dev/null) || return 1
  ns=$(ip netns identify "$pid" 2>/dev/null) || return 1
  [[ "$ns" == "mtc${id}-"* ]] || return 1
  kill "-$1" "$pid" 2>/dev/null
}

descendants() {
  local c
  for c in $(pgrep -P "$1"); do
    echo "$c"
    descendants "$c"
  done
}

# Stops every daemon `up` started and every job step's processes (SIGTERM to the daemons, up to
# 3 s, then SIGKILL), then removes the state. Processes a client started (mpirun under salloc)
# are the caller's.
cmd_down() {
  names
  local f p n left nodes=""
  [[ -f "$cdir/nodes" ]] && nodes="$(cat "$cdir/nodes") login"
  for f in "$dir"/pids/*; do
    [[ -f "$f" ]] && kill_ours TERM "$f"
  done
  # The steps: slurmstepd and everything under it (the tasks), at once.
  for n in $nodes; do
    for p in $(pids_named "$n" slurmstepd); do
      kill -9 "$p" $(descendants "$p") 2>/dev/null
    done
  done
  for _ in $(seq 1 30); do
    left=0
    for f in "$dir"/pids/*; do
      [[ -f "$f" ]] && kill_ours 0 "$f" && left=1
    done
    [[ $left -eq 0 ]] && break
    sleep 0.1
  done
  for f in "$dir"/pids/*; do
    [[ -f "$f" ]] && kill_ours KILL "$f"
  done
  # Whatever a run whose PID files are gone left in this cluster's namespaces.
  for n in $nodes; do
    for p in $(pids_named "$n" slurmstepd slurmd slurmctld munged); do
      kill -9 "$p" $(descendants "$p") 2>/dev/null
    done
  done
  rm -rf "$dir"
  return 0
}

write_conf() {
  local cpus="$1" nodes n i
  nodes=$(cat "$cdir/nodes")
  n=$(echo "$nodes" | wc -l)
  cat >"$conf" <<EOF
# Written by tools/cluster/slurm.sh for test cluster $id.
ClusterName=mtc$id
SlurmctldHost=login($net.254)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$msock
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$dir/ctld
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/run/slurmd.%n.pid
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: processes are tracked through /proc, tasks are neither bound nor confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MailProg=/bin/true
MpiDefault=none
SchedulerType=sched/builtin
# Start a batch job at once rather than within 3 s (the default batch_sched_delay).
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
# A node that was down comes back by itself once its slurmd registers; short timeouts so that a
# dead node or a stuck job is noticed within a test's time.
ReturnToService=2
SlurmdTimeout=20
SlurmctldTimeout=20
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=30
Waittime=0
UnkillableStepTimeout=30
EOF
  for node in $nodes; do
    i=${node#node}
    echo "NodeName=$node NodeAddr=$net.$i NodeHostname=$node CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN" >>"$conf"
  done
  echo "PartitionName=debug Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4" >>"$conf"
  # slurmd loads a cgroup plugin even when nothing uses cgroups, and its autodetection fails
  # inside a node: `ip netns exec` gave the node a fresh /sys with nothing at /sys/fs/cgroup.
  # Naming the v1 plugin skips the detection; with proctrack/linuxproc and task/none it is
  # never asked to do anything.
  echo "CgroupPlugin=cgroup/v1" >"$dir/etc/cgroup.conf"
  # srun --mpi=pmix: the PMIx plugin makes each step's client directory under /tmp by default,
  # which every node here shares, so the second node's slurmstepd finds the first's and fails
  # ("Cannot create client cli tmpdir ... File exists"); each node's /dev/shm is its own.
  echo "PMIxCliTmpDirBase=/dev/shm" >"$dir/etc/mpi.conf"
}

cmd_up() {
  local cpus
  cpus=$(nproc)
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --id)
        [[ "${2:-}" =~ ^[0-9]+$ && "$2" -le 255 ]] || die "--id takes 0-255, not '${2:-}'"
        id="$2"; shift 2 ;;
      --cpus) cpus="${2:-}"; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ "$cpus" =~ ^[0-9]+$ && "$cpus" -ge 1 ]] || die "--cpus takes a positive number, not '$cpus'"
  names
  local why
  why=$(why_not)
  [[ -z "$why" ]] || die "$why"
  [[ -f "$cdir/nodes" ]] || die "cluster $id is not up (run tools/cluster/cluster.sh up --id $id first)"
  holder_pid login >/dev/null
  cmd_down
  rm -rf "$cdir/slurm-logs"
  mkdir -p "$dir"/{etc,munge,ctld,spool,run,log,pids} || die "cannot create $dir"
  write_conf "$cpus"
  local up_timeout="${MT_SLURM_UP_TIMEOUT:-30}"

  # munge: a daemon per node (login included), sharing one key; seed and PID files beside it.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  local node nodes
  nodes="login $(cat "$cdir/nodes")"
  for node in $nodes; do
    # In the foreground munged logs to stderr: log/munged.NODE.out.
    daemon "$node" "munged.$node" munged --foreground --force --socket="$msock" \
      --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.$node.pid" \
      --seed-file="$dir/munge/munged.$node.seed"
  done
  # Each answers: a credential made on the login node decodes on every node (same key).
  local cred deadline=$((SECONDS + 10))
  for node in $nodes; do
    while ! cred=$(in_node "$node" munge -n -S "$msock" 2>/dev/null) ||
      ! in_node login unmunge -S "$msock" <<<"$cred" >/dev/null 2>&1; do
      kill -0 "$(cat "$dir/pids/munged.$node")" 2>/dev/null ||
        fail_up "munged on $node exited: $(grep . "$dir/log/munged.$node.out" 2>/dev/null | tail -n 1)"
      [[ $SECONDS -lt $deadline ]] || fail_up "munged on $node does not answer after 10 s"
      sleep 0.1
    done
  done

  daemon login slurmctld slurmctld -D -i
  for node in $(cat "$cdir/nodes"); do
    mkdir -p "$dir/spool/$node"
    daemon "$node" "slurmd.$node" slurmd -D -N "$node"
  done

  # Every node idle, within the bound.
  local n want state deadline=$((SECONDS + up_timeout))
  want=$(wc -l <"$cdir/nodes")
  while :; do
    state=$(in_node login timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null)
    n=$(echo "$state" | awk '$2 == "idle"' | wc -l)
    [[ "$n" -eq "$want" ]] && break
    for f in "$dir"/pids/*; do
      kill -0 "$(cat "$f")" 2>/dev/null || {
        local name
        name=$(basename "$f")
        local why_log
        why_log=$(grep -hiE 'error|fatal' "$dir/log/$name.out" "$dir/log/$name.log" 2>/dev/null | tail -n 1)
        fail_up "$name exited during startup: ${why_log:-no message}"
      }
    done
    if [[ $SECONDS -ge $deadline ]]; then
      local msg
      msg=$(echo "$state" | tr '\n' ' ')
      fail_up "nodes not idle after ${up_timeout} s (sinfo: ${msg:-no answer from slurmctld})"
    fi
    sleep 0.2
  done
  echo "$dir"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  if [[ "${1:-}" == "--id" ]]; then
    [[ "${2:-}" =~ ^[0-9]+$ && "$2" -le 255 ]] || die "--id takes 0-255, not '${2:-}'"
    id="$2"
    shift 2
  fi
  names
  case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down ;;
    check)
      local why
      why=$(why_not)
      [[ -z "$why" ]] || { echo "$why"; exit 1; }
      ;;
    env) echo "SLURM_CONF=$conf" ;;
    srun | salloc | sbatch | squeue | sinfo | scancel | scontrol | sacct)
      [[ -f "$conf" ]] || die "slurm is not up on cluster $id (run slurm.sh up --id $id)"
      pid=$(holder_pid login) || exit 1
      SLURM_CONF="$conf" exec nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$cmd" "$@"
      ;;
    *) die "unknown command '$cmd' (up, down, check, env, srun, salloc, sbatch, squeue, sinfo, scancel, scontrol)" ;;
  esac
}

main "$@"
