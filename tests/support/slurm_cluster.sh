#!/usr/bin/env bash
# A one-node Slurm cluster of this machine, for tests that launch with a real `srun`.
#
#   slurm_cluster.sh start DIR CTLD_PORT SLURMD_PORT
#       Starts munged, slurmctld and slurmd with their key, config, state, sockets and logs in
#       DIR and the given ports; returns once the node is idle, printing the SLURM_CONF path.
#       Exits non-zero with the daemons' log tails when one fails to start (naming the command)
#       or the node is not idle within 30 s.
#   slurm_cluster.sh stop DIR
#       Stops the daemons that `start DIR` started.
#
# Needs the Debian packages slurmd, slurmctld, slurm-client and munge (installed, or unpacked and
# put on PATH by tools/gpu/slurm_env.sh), and root (slurmd).
set -euo pipefail

cmd=${1:?usage: slurm_cluster.sh start DIR CTLD_PORT SLURMD_PORT | stop DIR}
dir=${2:?DIR missing}

stop() {
  for daemon in slurmd slurmctld munged; do
    if [ -f "$dir/$daemon.pid" ]; then
      pid=$(cat "$dir/$daemon.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/$daemon.pid"
    fi
  done
}

case $cmd in
start)
  ctld_port=${3:?CTLD_PORT missing}
  slurmd_port=${4:?SLURMD_PORT missing}
  if [ "$(id -u)" -ne 0 ]; then
    echo "slurm_cluster.sh: slurmd needs root" >&2
    exit 1
  fi
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  # A daemon that fails after it forked may exit non-zero having written its cause only to its
  # log: whichever step fails, name it and show the logs.
  failed() {
    local status=$?
    echo "slurm_cluster.sh: '$BASH_COMMAND' exited with status $status" >&2
    tail -n 20 "$dir"/log/*.log >&2 || true
    stop
    exit 1
  }
  trap failed ERR
  head -c 1024 /dev/urandom >"$dir/munge.key"
  chmod 400 "$dir/munge.key"
  munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed"
  host=$(hostname -s)
  # The plugins and slurmstepd beside the slurmctld and slurmd that PATH finds: those of a Slurm
  # unpacked outside /usr (tools/gpu/slurm_env.sh) as well as the system's.
  sbin=$(dirname "$(readlink -f "$(command -v slurmctld)")")
  plugin_dir=""
  for found in "$sbin"/../lib/*/slurm-wlm; do
    [ -d "$found" ] && plugin_dir=$(readlink -f "$found") && break
  done
  stepd=""
  for found in "$sbin/slurmstepd" "$sbin/slurmstepd-wlm" "$(command -v slurmstepd || true)"; do
    [ -n "$found" ] && [ -e "$found" ] && stepd=$found && break
  done
  cat >"$dir/slurm.conf" <<CONF
ClusterName=crucibletest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
  [ -z "$plugin_dir" ] || echo "PluginDir=$plugin_dir" >>"$dir/slurm.conf"
  # slurmd loads a cgroup plugin whatever the other plugins are, and the one it detects by
  # default fails on a machine without a writable cgroup hierarchy of its own (a container: no
  # /sys/fs/cgroup, or a cgroup2 one that systemd did not delegate). No plugin here uses cgroups,
  # and the v1 plugin touches nothing until one does (Slurm 22.05 and 24.11, those tested here).
  echo "CgroupPlugin=cgroup/v1" >"$dir/cgroup.conf"
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -f "$SLURM_CONF" -i
  slurmd -f "$SLURM_CONF" ${stepd:+-d "$stepd"}
  for _ in $(seq 300); do
    if [ "$(sinfo -h -o %t 2>/dev/null)" = idle ]; then
      echo "$SLURM_CONF"
      exit 0
    fi
    sleep 0.1
  done
  echo "slurm_cluster.sh: the node did not become idle within 30 s" >&2
  tail -n 20 "$dir"/log/*.log >&2 || true
  stop
  exit 1
  ;;
stop)
  stop
  ;;
*)
  echo "slurm_cluster.sh: unknown command $cmd" >&2
  exit 2
  ;;
esac
