#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for trying and testing braid under Slurm:
# installs Debian's slurmctld, slurmd, the client commands and munge, writes
# /etc/slurm/slurm.conf for one node (this host, reached at 127.0.0.1, 4 CPUs whatever the
# cores, so a 2-core machine can run 4 tasks), and starts munged, slurmctld and slurmd with
# their state, logs and pid files under BRAID_SLURM_DIR (default /var/tmp/braid-slurm).
#
#   scripts/slurm/local-cluster.sh start    install (once), configure, start; idempotent
#   scripts/slurm/local-cluster.sh stop     stop the daemons it started
#   scripts/slurm/local-cluster.sh status   sinfo, or why not
#
# No cgroups (proctrack/linuxproc, task/none), no accounting database; the daemons listen on
# 127.0.0.1 only (SlurmctldHost and NodeAddr are loopback; slurmd binds its NodeAddr). Needs root.
set -euo pipefail
DIR=${BRAID_SLURM_DIR:-/var/tmp/braid-slurm}
CPUS=${BRAID_SLURM_CPUS:-4}
CONF=/etc/slurm/slurm.conf
HOST=$(hostname -s)

die() { echo "local-cluster: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" -eq 0 ] || die "needs root (to install packages and run slurmd)"; }

install() {
  local missing=()
  for p in slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "local-cluster: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    > "$DIR/apt.log" 2>&1 || { tail -20 "$DIR/apt.log"; die "apt-get install failed"; }
}

write_config() {
  mkdir -p /etc/slurm "$DIR/state" "$DIR/spool"
  cat > "$CONF" <<CONF
# Written by braid's scripts/slurm/local-cluster.sh: one node, this host, on loopback.
ClusterName=braid
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  [ -s /etc/munge/munge.key ] || { mungekey --create --force; chown munge:munge /etc/munge/munge.key; }
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  for _ in $(seq 50); do
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "munged did not start (see /var/log/munge/munged.log)"
}

start() {
  need_root
  mkdir -p "$DIR"
  if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" && sinfo -h >/dev/null 2>&1; then
    echo "local-cluster: already up"; sinfo; return 0
  fi
  install
  write_config
  start_munge
  alive "$DIR/slurmctld.pid" || slurmctld -i
  alive "$DIR/slurmd.pid" || slurmd
  for _ in $(seq 150); do
    if [ "$(sinfo -h -o %t 2>/dev/null | head -1)" = idle ]; then
      echo "local-cluster: up (node $HOST, $CPUS CPUs, partition debug)"
      sinfo
      return 0
    fi
    sleep 0.2
  done
  echo "--- slurmctld.log"; tail -15 "$DIR/slurmctld.log" 2>/dev/null || true
  echo "--- slurmd.log"; tail -15 "$DIR/slurmd.log" 2>/dev/null || true
  sinfo 2>&1 || true
  die "the node did not become idle within 30 s"
}

stop() {
  need_root
  for d in slurmd slurmctld; do
    if alive "$DIR/$d.pid"; then
      kill "$(cat "$DIR/$d.pid")"
      for _ in $(seq 50); do alive "$DIR/$d.pid" || break; sleep 0.1; done
      alive "$DIR/$d.pid" && kill -9 "$(cat "$DIR/$d.pid")"
    fi
    rm -f "$DIR/$d.pid"
  done
  if [ -f /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; then
    kill "$(cat /run/munge/munged.pid)"
  fi
  echo "local-cluster: stopped"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) sinfo ;;
  *) die "usage: local-cluster.sh start | stop | status" ;;
esac
