#!/usr/bin/env bash
# A SLURM cluster of N nodes on this machine, for tests (Debian's slurm-wlm, munge and iproute2; as root).
#
#   start [N]   one munged and one slurmctld here, and N slurmd (default 2), each in its own network and UTS
#               namespace: host name nodeK, address $NET.(10+K) on a bridge made here (never a real network),
#               every node's name resolvable on every node (its own mount namespace binds /etc/netns/NS/hosts
#               over /etc/hosts), its own spool, pid and log files. Two partitions: debug (every node, the default,
#               no time limit) and short (the last node, MaxTime 1 minute, SLURM's smallest: time limits for real).
#               Job credentials live 15 s (cred_expire), so a requeued job waits 16 s before it runs again, not 121.
#               A cluster of N nodes already up with this configuration is kept; anything else (another size, an
#               older configuration, a crash's leftovers) is removed first.
#   stop        removes all of it: the job processes and daemons (by their namespace and pid files), the
#               namespaces, the links, the per-node hosts files and the slurm.conf written here.
set -euo pipefail
STATE=${SLURM_LOCAL_STATE:-/run/slurm-local}
NET=${SLURM_LOCAL_NET:-10.203.77}  # a /24 no real interface uses
BRIDGE=slurmbr0
PREFIX=slurm-node  # network namespaces: slurm-node1, slurm-node2, ...
CONF=/etc/slurm/slurm.conf
MARK="# written by scripts/slurm_local.sh"
LOCK=/run/slurm-local.lock

signal_pids() {  # signal, pids...: send it, then wait (up to 10 s) until they are gone
    local sig=$1 pid left
    shift
    [ $# -gt 0 ] || return 0
    kill "-$sig" "$@" 2>/dev/null || true
    for _ in $(seq 1 100); do
        left=""
        for pid in "$@"; do
            alive "$pid" && left=$pid
        done
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    return 1
}

alive() {  # a zombie is gone for our purpose: its parent reaps it
    [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

pid_in() {  # pid file -> its pid when that process runs
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && alive "$pid" && echo "$pid"
}

ours() {  # the slurm.conf is this script's (or its single-node predecessor's, which began with ClusterName=local)
    local first
    first=$(head -n 1 "$CONF" 2>/dev/null) && { [ "$first" = "$MARK" ] || [ "$first" = "ClusterName=local" ]; }
}

namespaces() { ip netns list 2>/dev/null | awk -v p="$PREFIX" 'index($1, p) == 1 {print $1}'; }

cleanup() {
    local ns pids daemon link
    for ns in $(namespaces); do  # slurmd, slurmstepd and every job process live in their node's namespace
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        # shellcheck disable=SC2086
        signal_pids TERM $pids || signal_pids KILL $pids || { echo "processes $pids of $ns survive SIGKILL" >&2; return 1; }
        ip netns del "$ns"
        rm -rf "/etc/netns/$ns"
    done
    rmdir /etc/netns 2>/dev/null || true  # when the nodes' hosts files were all it held
    for daemon in slurmctld munge/munged; do
        pids=$(pid_in "$STATE/$daemon.pid") || continue
        signal_pids TERM "$pids" || signal_pids KILL "$pids"
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep '^slurmv' || true); do
        ip link del "$link"
    done
    if ours; then rm -f "$CONF"; fi
    rm -rf "$STATE"
}

up_nodes() {  # how many nodes answer (sinfo -N lists a node once per partition)
    sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | awk -v states="$1" '$2 ~ "^(" states ")$"' | wc -l
}

healthy() {  # a cluster of $1 nodes, all daemons alive, every node answering, the configuration this script writes
    local n=$1 k
    [ "$(cat "$STATE/nodes" 2>/dev/null)" = "$n" ] || return 1
    [ "$(write_conf "$n" /dev/stdout)" = "$(cat "$CONF" 2>/dev/null)" ] || return 1
    pid_in "$STATE/munge/munged.pid" >/dev/null && pid_in "$STATE/slurmctld.pid" >/dev/null || return 1
    for k in $(seq 1 "$n"); do
        pid_in "$STATE/node$k/slurmd.pid" >/dev/null || return 1
    done
    [ "$(up_nodes 'idle|mixed|allocated|completing|planned')" = "$n" ]
}

start_munge() {
    mkdir -p "$STATE/munge"
    chown munge:munge "$STATE/munge"
    chmod 755 "$STATE/munge"  # munged wants its socket reachable by every user
    runuser -u munge -- mungekey --create --keyfile="$STATE/munge/munge.key" >/dev/null
    runuser -u munge -- munged 9>&- --socket="$STATE/munge/munge.socket" --key-file="$STATE/munge/munge.key" \
        --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
        --seed-file="$STATE/munge/munged.seed"
}

write_conf() {  # nodes [file]: slurm.conf for that many nodes, into the file (default: $CONF)
    local n=$1 out=${2:-$CONF} cpus mem
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS, which tests pin to 1
    # every node is this whole machine: each slurmd checks the configuration against the hardware it sees
    mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
    mkdir -p "$(dirname "$out")"
    {
        echo "$MARK"
        cat <<CONFIG
ClusterName=local
SlurmctldHost=$(hostname -s)($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/munge.socket,cred_expire=15
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
KillWait=5
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/%n/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/%n/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/%n/slurmd.log
SchedulerType=sched/backfill
MinJobAge=300
CONFIG
        for k in $(seq 1 "$n"); do
            echo "NodeName=node$k NodeAddr=$NET.$((10 + k)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP"
        echo "PartitionName=short Nodes=node$n MaxTime=1 State=UP"
    } > "$out"
}

make_network() {
    local n=$1 k ns
    ip link add "$BRIDGE" type bridge
    ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for k in $(seq 1 "$n"); do
        ns=$PREFIX$k
        ip netns add "$ns"
        ip link add "slurmv$k" type veth peer name eth0 netns "$ns"
        ip link set "slurmv$k" master "$BRIDGE" up
        ip -n "$ns" addr add "$NET.$((10 + k))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        mkdir -p "/etc/netns/$ns"
        {
            printf '127.0.0.1 localhost\n%s.1 %s\n' "$NET" "$(hostname -s)"
            for j in $(seq 1 "$n"); do printf '%s.%s node%s\n' "$NET" $((10 + j)) "$j"; done
        } > "/etc/netns/$ns/hosts"
    done
}

start() {
    local n=${1:-2} k
    [[ "$n" =~ ^[1-9][0-9]?$ ]] || { echo "start: N must be a node count from 1 to 99, got '$n'" >&2; return 2; }
    if healthy "$n"; then
        echo "slurm up: $(sinfo -h -o '%P %D %T %C')"
        return 0
    fi
    if [ -e "$CONF" ] && ! ours; then
        echo "$CONF was not written by $0: a real cluster's configuration is not replaced (remove it if it is not)" >&2
        return 1
    fi
    cleanup
    mkdir -p "$STATE/ctld"
    echo "$n" > "$STATE/nodes"
    start_munge
    write_conf "$n"
    make_network "$n"
    slurmctld 9>&-  # a daemon keeping the lock's descriptor would hold the lock for its whole life
    for k in $(seq 1 "$n"); do
        mkdir -p "$STATE/node$k/spool"
        # slurmd and every job step it starts: the node's network namespace; a UTS namespace whose host name,
        # nodeK, is the node name slurmd looks for; a mount namespace for the node's hosts file (not `ip netns
        # exec`: it remounts /sys and hides /sys/fs/cgroup, without which slurmd does not start)
        nsenter --net="/run/netns/$PREFIX$k" -- unshare --uts --mount --propagation slave -- \
            sh -c "mount --bind /etc/netns/$PREFIX$k/hosts /etc/hosts && hostname node$k && exec slurmd" 9>&-
    done
    for _ in $(seq 1 150); do
        if [ "$(up_nodes 'idle|mixed|allocated')" = "$n" ]; then
            echo "slurm up: $(sinfo -h -o '%P %D %T %C')"
            return 0
        fi
        scontrol update nodename="node[1-$n]" state=resume >/dev/null 2>&1 || true
        sleep 0.2
    done
    echo "slurm did not come up; see $STATE/*.log and $STATE/node*/slurmd.log" >&2
    sinfo -N >&2 || true
    return 1
}

mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock 9  # one start or stop at a time (test files on several workers all start the cluster)
case "${1:-}" in
    start) start "${2:-2}" ;;
    stop) cleanup ;;
    *) echo "usage: $0 start [NODES] | stop" >&2; exit 2 ;;
esac
