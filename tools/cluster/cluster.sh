#!/bin/bash
# A multi-node cluster on this one machine, for tests and for trying multi-node runs locally:
# N "nodes", each a network namespace with its own hostname (UTS namespace) and its own /dev/shm
# (mount namespace), joined by a Linux bridge, with addresses from the benchmarking block
# 198.18.0.0/15 (never a real network). OpenMPI launches into it through tools/cluster/rsh, an
# rsh agent that enters a node's namespaces, so no sshd is needed. Needs root.
#
#   tools/cluster/cluster.sh up [--nodes N] [--id K] [--rate RATE]   # prints the state directory
#   tools/cluster/cluster.sh mpirun [--id K] MPIRUN_ARGS...   # e.g. -H node1:2,node2:2 BIN ARGS
#   tools/cluster/cluster.sh exec [--id K] NODE CMD...        # a command inside node NODE
#   tools/cluster/cluster.sh shape [--id K] RATE|off          # tc tbf on every link, both ways
#   tools/cluster/cluster.sh link [--id K] NODE down|up       # cut or restore NODE's link
#   tools/cluster/cluster.sh signal [--id K] NODE SIGNAL      # every process inside NODE
#   tools/cluster/cluster.sh pids [--id K] NODE               # the processes inside NODE
#   tools/cluster/cluster.sh down [--id K]                    # removes everything `up` made
#   tools/cluster/cluster.sh check                            # exit 0 if a cluster can be made
#
# Cluster K (0-255, default 0) has the bridge mtc<K>, namespaces mtc<K>-node<i>, node i at
# 198.18.K.i/24, and a login node mtc<K>-login at 198.18.K.254, where `mpirun` runs (its
# hostname is `login`; it runs no ranks). Its state directory is /tmp/mt_cluster.<K>: the node
# holders' PIDs (a process per node that keeps its UTS and mount namespaces alive), the hosts file
# every node sees as /etc/hosts, and a log. RATE is N kbit, mbit or gbit, e.g. 1gbit or 200mbit;
# the kernel here has tbf but no netem, so latency is what the virtual links give (tens of
# microseconds).
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # ip, tc, nsenter (a test's PATH may lack them)

die() {
  echo "cluster.sh: error: $*" >&2
  exit 1
}

id=0
parse_id() {
  if [[ "${1:-}" == "--id" ]]; then
    [[ "${2:-}" =~ ^[0-9]+$ && "$2" -le 255 ]] || die "--id takes 0-255, not '${2:-}'"
    id="$2"
    return 2
  fi
  return 0
}

names() {
  br="mtc${id}"
  dir="/tmp/mt_cluster.${id}"
  net="198.18.${id}"
}
ns_of() { echo "mtc${id}-$1"; }
# Host side of a node's link: mtc<K>n<i>, mtc<K>login.
veth_of() { echo "mtc${id}${1/node/n}"; }

holder_pid() {
  local f="$dir/$1.pid" pid
  [[ -f "$f" ]] || die "no node '$1' in cluster $id (is it up?)"
  pid=$(cat "$f")
  # A state file can outlive its cluster (a reboot keeps /tmp on some machines): the PID must
  # still be the node's holder, whose hostname is the node's (checked through its UTS namespace,
  # which works from inside another node too, where /run/netns may not show this one).
  [[ "$pid" =~ ^[0-9]+$ && "$(nsenter -t "$pid" -u hostname 2>/dev/null)" == "$1" ]] ||
    die "node '$1' of cluster $id is gone (stale $f): run down, then up"
  echo "$pid"
}

nodes() {
  [[ -f "$dir/nodes" ]] || die "cluster $id is not up ($dir/nodes missing)"
  cat "$dir/nodes"
}

# Why a cluster cannot be made here, or nothing.
why_not() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "needs root (network namespaces, a bridge and tc)"
    return
  fi
  local probe="mtcprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "cannot create a network namespace (ip netns add failed)"
    return
  fi
  local out
  if ! out=$(ip netns exec "$probe" unshare --uts --mount true 2>&1); then
    ip netns del "$probe"
    echo "cannot create UTS/mount namespaces: $out"
    return
  fi
  ip netns del "$probe"
  if ! ip link add "${probe:0:15}" type bridge 2>/dev/null; then
    echo "cannot create a bridge"
    return
  fi
  ip link del "${probe:0:15}"
  command -v tc >/dev/null || echo "tc (iproute2) is missing"
}

cmd_down() {
  names
  # Every process inside the cluster's namespaces (the holders among them), again until none is
  # left (a daemon may be forking), at most 50 rounds of 0.1 s. PIDs in state files are not
  # trusted: the file may have outlived its process.
  local ns p k
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^mtc${id}-(node[0-9]+|login)$"); do
    for k in $(seq 1 50); do
      p=$(ip netns pids "$ns" 2>/dev/null)
      [[ -z "$p" ]] && break
      kill -9 $p 2>/dev/null
      sleep 0.1
    done
    ip netns del "$ns" 2>/dev/null
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
    grep -E "^mtc${id}(n[0-9]+|login)$"); do
    ip link del "$l" 2>/dev/null
  done
  ip link del "$br" 2>/dev/null
  rm -rf "$dir"
  return 0
}

# make_node NAME ADDRESS: a namespace on the bridge, and its holder, which keeps the node's
# hostname, private /dev/shm and /etc/hosts alive (its PID in $dir/NAME.pid).
make_node() {
  local node="$1" ns veth k
  ns=$(ns_of "$node")
  veth=$(veth_of "$node")
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$br" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$2/24" dev eth0
  ip -n "$ns" link set eth0 up
  # A connection whose data goes unacknowledged is given up after ~6 s (5 retransmissions from
  # the 200 ms minimum timeout) instead of Linux's default ~15 min: mpirun's order to kill the
  # ranks must not wait that long on a daemon behind a cut link (docs/multinode.md).
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=4
  ip netns exec "$ns" unshare --uts --mount --propagation private --fork sh -c \
    'echo $$ >"$1/$2.pid.tmp"; hostname "$2"; mount -t tmpfs -o size=4g,mode=1777 tmpfs /dev/shm &&
     mount --bind "$1/hosts" /etc/hosts && mv "$1/$2.pid.tmp" "$1/$2.pid" && exec sleep infinity' \
    sh "$dir" "$node" >>"$dir/log" 2>&1 &
  echo $! >"$dir/$node.unshare"  # The holder's parent (ip netns exec became unshare).
  for k in $(seq 1 100); do
    [[ -f "$dir/$node.pid" ]] && return 0
    sleep 0.05
  done
  false
}

cmd_up() {
  local n=2 rate=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --nodes) n="$2"; shift 2 ;;
      --rate) rate="$2"; shift 2 ;;
      --id) parse_id "$@"; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 64 ]] || die "--nodes takes 1-64, not '$n'"
  [[ -z "$rate" || "$rate" == off ]] || burst_of "$rate" >/dev/null || exit 1
  names
  local why
  why=$(why_not)
  [[ -z "$why" ]] || die "$why"
  cmd_down  # Whatever a failed run of the same cluster left.
  mkdir -p "$dir" || die "cannot create $dir"
  trap 'cmd_down; die "up failed; removed what it had made"' ERR
  set -E
  ip link add "$br" type bridge
  ip link set "$br" up
  {
    echo "127.0.0.1 localhost"
    echo "$net.254 login"
    for i in $(seq 1 "$n"); do echo "$net.$i node$i"; done
  } >"$dir/hosts"
  make_node login "$net.254"
  for i in $(seq 1 "$n"); do
    make_node "node$i" "$net.$i"
    echo "node$i" >>"$dir/nodes"
  done
  trap - ERR
  [[ -z "$rate" ]] || cmd_shape "$rate"
  echo "$dir"
}

# burst_of RATE: tbf's bucket for RATE in bytes, or a one-line error and exit 1.
burst_of() {
  local rate="$1" bits burst
  [[ "$rate" =~ ^([0-9]+)(kbit|mbit|gbit)$ ]] ||
    die "shape takes a rate such as 200mbit, 1gbit or 5gbit (or off), not '$rate'"
  local n="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[2]}"
  case "$unit" in
    kbit) bits=$((n * 1000)) ;;
    mbit) bits=$((n * 1000000)) ;;
    gbit) bits=$((n * 1000000000)) ;;
  esac
  [[ $bits -gt 0 ]] || die "shape: a rate of 0"
  # The bucket holds ${MT_CLUSTER_BURST_MS:-1} ms at the rate (at least 64 KB): small, so that an
  # idle link does not save up a large free transfer, yet enough for tbf to reach its rate.
  burst=$((bits / 8 * ${MT_CLUSTER_BURST_MS:-1} / 1000))
  [[ $burst -ge 65536 ]] || burst=65536
  echo "$burst"
}

cmd_shape() {
  names
  local rate="$1" burst=0
  if [[ "$rate" != off ]]; then
    burst=$(burst_of "$rate") || exit 1
  fi
  for node in $(nodes); do
    local veth ns
    veth=$(veth_of "$node")
    ns=$(ns_of "$node")
    tc qdisc del dev "$veth" root 2>/dev/null
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null
    [[ "$rate" == "off" ]] && continue
    tc qdisc add dev "$veth" root tbf rate "$rate" burst "$burst" latency 10ms ||
      die "tc refused rate '$rate'"
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 10ms ||
      die "tc refused rate '$rate' in $node"
  done
}

# The processes inside NODE other than its holder and the holder's parent.
job_pids() {
  local holder parent
  holder=$(holder_pid "$1") || exit 1
  parent=$(cat "$dir/$1.unshare" 2>/dev/null)
  ip netns pids "$(ns_of "$1")" | grep -vxE "${holder}|${parent:-$holder}" || true
}

enter() {
  local pid
  pid=$(holder_pid "$1") || exit 1
  shift
  exec nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$@"
}

cmd_mpirun() {
  names
  nodes >/dev/null
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MT_CLUSTER_ID="$id"
  # mpirun runs on the login node. The settings docs/multinode.md explains: launch through the
  # namespace agent, talk only over the cluster's subnet, shared memory inside a node and TCP
  # between nodes, and give up on a daemon whose idle connection has stopped answering for
  # ~25 s (keepalive), so a cut link ends the job even before the ranks' watchdogs notice.
  local login
  login=$(holder_pid login) || exit 1
  exec nsenter -t "$login" -n -u -m --wd="$PWD" -- mpirun --mca plm_rsh_agent "$here/rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" \
    --mca btl self,vader,tcp --mca mpi_yield_when_idle 1 \
    --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 5 \
    --mca oob_tcp_keepalive_probes 3 --bind-to none "$@"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  if [[ "${1:-}" == "--id" ]]; then
    parse_id "$@"
    shift 2
  fi
  case "$cmd" in
    up) cmd_up "$@" ;;
    down) names; cmd_down ;;
    check)
      local why
      why=$(why_not)
      [[ -z "$why" ]] || { echo "$why"; exit 1; }
      ;;
    exec)
      [[ $# -ge 2 ]] || die "exec NODE CMD..."
      names
      enter "$@"
      ;;
    shape)
      [[ $# -eq 1 ]] || die "shape RATE|off"
      cmd_shape "$1"
      ;;
    link)
      [[ $# -eq 2 && ("$2" == up || "$2" == down) ]] || die "link NODE down|up"
      names
      holder_pid "$1" >/dev/null
      ip link set "$(veth_of "$1")" "$2"
      ;;
    pids)
      [[ $# -eq 1 ]] || die "pids NODE"
      names
      job_pids "$1"
      ;;
    signal)
      [[ $# -eq 2 ]] || die "signal NODE SIGNAL"
      names
      for p in $(job_pids "$1"); do kill -s "$2" "$p" 2>/dev/null; done
      ;;
    mpirun) cmd_mpirun "$@" ;;
    *) die "unknown command '$cmd' (up, down, check, exec, shape, link, pids, signal, mpirun)" ;;
  esac
}

main "$@"
