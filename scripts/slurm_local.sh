#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for tests: `start` writes a config for this host and starts
# munged, slurmctld and slurmd (as root); `stop` ends them. Needs Debian's slurm-wlm and munge.
set -euo pipefail
STATE=${SLURM_LOCAL_STATE:-/tmp/slurm-local}
CONF=/etc/slurm/slurm.conf

start() {
    mkdir -p "$STATE/ctld" "$STATE/d" "$STATE/log" /etc/slurm /run/munge /var/log/munge /var/lib/munge
    chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge 2>/dev/null || true
    [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create >/dev/null 2>&1 || \
        (dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null && chown munge:munge /etc/munge/munge.key)
    chmod 400 /etc/munge/munge.key
    pgrep -x munged >/dev/null || runuser -u munge -- munged
    local host cpus mem
    host=$(hostname -s)
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS, which tests pin to 1
    mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
    cat > "$CONF" <<CONFIG
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SchedulerType=sched/backfill
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONFIG
    pgrep -x slurmctld >/dev/null || slurmctld
    pgrep -x slurmd >/dev/null || slurmd
    for _ in $(seq 1 100); do
        if sinfo -h -o %T 2>/dev/null | grep -q -E '^(idle|mixed|allocated)'; then
            echo "slurm up: $(sinfo -h -o '%P %D %T %C')"
            return 0
        fi
        scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
        sleep 0.2
    done
    echo "slurm did not come up; see $STATE/log" >&2
    return 1
}

stop() {
    local name
    for name in slurmd slurmctld munged; do
        pkill -x "$name" 2>/dev/null || true
    done
    # a daemon saving its state outlives the signal for a moment; a start right after would find it alive
    for _ in $(seq 1 100); do
        pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || pgrep -x munged >/dev/null || return 0
        sleep 0.1
    done
    echo "slurm daemons still running after 10 s" >&2
    return 1
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
