#!/usr/bin/env bash
# at_step.sh [--wait S] METRICS STEP ACTION HOST PROGRAM -- COMMAND...: runs COMMAND (inside scripts/hosts.sh) and,
# once METRICS (its --metrics file, removed first) holds STEP steps, has the harness do ACTION (link-down, kill) to
# HOST, or kill-ranks: kills the PROGRAM processes on HOST (its ranks; the host and Open MPI's daemon stay). Then
# watches every host for processes named PROGRAM (the ranks) and prints, when the last has gone,
#   at_step: ACTION HOST after step STEP; every rank ended N s later
# and waits for COMMAND (the launcher), at most 10 s more, and exits with its status (124 when it was still running and
# was killed: Open MPI's mpirun can wait much longer for a daemon it cannot reach). Status 3: COMMAND ended before
# step STEP. A link taken down is brought back up before this script exits.
# --wait S: a COMMAND that goes on after the ACTION (a launcher that restarts the job): no watch of the ranks; waits
# for COMMAND at most S s and exits with its status (124, and COMMAND killed, past S).
set -uo pipefail
wait_s=""
if [ "${1:-}" = --wait ]; then wait_s=$2; shift 2; fi
[ $# -ge 7 ] && [ "$6" = -- ] ||
  { echo "usage: at_step.sh [--wait S] METRICS STEP ACTION HOST PROGRAM -- COMMAND..." >&2; exit 2; }
metrics=$1 step=$2 action=$3 host=$4 program=$5
shift 6
rm -f "$metrics"
"$@" &
pid=$!
while [ "$(cat "$metrics" 2>/dev/null | wc -l)" -lt "$step" ]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    echo "at_step: the command ended (status $?) before step $step"
    exit 3
  fi
  sleep 0.05
done
host_ranks() {  # the PROGRAM processes on host $1
  local p
  for p in $($STRATA_HOSTS_CTL pids "$1"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "${program:0:15}" ] && echo "$p"
  done
}
if [ "$action" = kill-ranks ]; then
  ranks=$(host_ranks "$host")
  [ -z "$ranks" ] || kill -KILL $ranks
else
  $STRATA_HOSTS_CTL "$action" "$host"
fi
t0=$(date +%s.%N)
since() { echo "$(date +%s.%N) - $t0" | bc; }
# A link taken down comes back up when this script ends, for the next job on the same hosts.
[ "$action" = link-down ] && trap '$STRATA_HOSTS_CTL link-up "$host"' EXIT
# wait_command S: whether COMMAND ended within S seconds. finish WHO: exits with COMMAND's status, said.
wait_command() {
  local i
  for ((i = 0; i < $1 * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  ! kill -0 "$pid" 2>/dev/null
}
finish() {
  wait "$pid"
  local status=$?
  echo "at_step: $1 ended $(since) s after the $action (status $status)"
  exit "$status"
}
if [ -n "$wait_s" ]; then
  echo "at_step: $action $host after step $step; waiting for the command"
  if ! wait_command "$wait_s"; then
    echo "at_step: the command was still running $(since) s after the $action: killed"
    kill -TERM "$pid" 2>/dev/null
    sleep 2
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    exit 124
  fi
  finish "the command"
fi
ranks_left() {  # the PROGRAM processes on any host
  local h
  while read -r h; do host_ranks "$h"; done <"$STRATA_HOSTFILE"
}
while [ -n "$(ranks_left)" ]; do sleep 0.1; done
echo "at_step: $action $host after step $step; every rank ended $(since) s later"
if ! wait_command 10; then
  echo "at_step: the launcher was still running $(since) s after the $action: killed"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  # Its daemons on the hosts (the unreachable one among them) hold its output open: ended too.
  while read -r h; do $STRATA_HOSTS_CTL kill "$h"; done <"$STRATA_HOSTFILE"
  exit 124
fi
finish "the launcher"
