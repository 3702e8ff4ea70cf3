# Test helpers (sourced): the listening sockets of one job, found by its processes rather than by
# name, so that another job running at the same time (a concurrent test) is never counted.
#   job_pids PID        PID and every descendant of it, one per line
#   job_listeners PID   `ss -ltunpH` lines (TCP and UDP listeners) of those processes in this
#                       network namespace
#   netns_listeners NS  the same for every process of network namespace NS (a test's own host,
#                       whose daemons detach from the launcher's process tree)

job_pids() {
  local todo=("$1") pid child
  while [ ${#todo[@]} -gt 0 ]; do
    pid=${todo[0]}
    todo=("${todo[@]:1}")
    echo "$pid"
    for child in $(pgrep -P "$pid"); do todo+=("$child"); done
  done
}

# listeners_of PIDS [NS]: the listeners of the processes PIDS (one per line), in NS or here.
listeners_of() {
  local pids
  pids=$(paste -sd'|' <<< "$1")
  [ -n "$pids" ] || return 0
  if [ -n "${2:-}" ]; then ip netns exec "$2" ss -ltunpH; else ss -ltunpH; fi |
    grep -E "pid=($pids),"
}

job_listeners() { listeners_of "$(job_pids "$1")"; }
netns_listeners() { listeners_of "$(ip netns pids "$1")" "$1"; }
