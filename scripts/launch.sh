#!/usr/bin/env bash
# Launches a Strata program on one or more nodes through the job's MPI (docs/multi-node.md): Open MPI's mpirun with a
# hostfile, Slurm's srun inside an allocation, or mpirun on this machine. Every STRATA_* variable of this shell reaches
# every rank, ranks are placed node by node (ranks k x K .. k x K + K - 1 on node k, which --dp-shard node and the tp
# groups rely on), and the command is printed before it runs.
#
# Usage: scripts/launch.sh [--hostfile FILE | --slurm] [--ranks-per-node K] [--bind core|none] [--tcp] [--dry-run]
#                          [--max-restarts N] [--mpi-arg ARG]... -- PROGRAM [ARGS...]
#   --hostfile FILE     Open MPI hostfile (each host once, one per line; --ranks-per-node ranks on each, "slots=" no fewer)
#   --slurm             srun --mpi=pmix in the current allocation (K defaults to SLURM_NTASKS_PER_NODE)
#   --ranks-per-node K  ranks on each node (default: SLURM_NTASKS_PER_NODE, else the GPUs nvidia-smi lists, else 1)
#   --bind core|none    bind each rank to cores (default core; none when more ranks than cores run on this machine)
#   --tcp               Open MPI over TCP only (pml ob1, btl tcp,self): no shared memory, no InfiniBand
#   --mpi-arg ARG       one more argument for mpirun (repeatable), e.g. --mpi-arg --mca --mpi-arg btl_tcp_if_include
#   --dry-run           print the command, do not run it
#   --max-restarts N    with --hostfile: when a host fails (its ranks killed, its daemon lost, or Strata naming its
#                       ranks as gone), drop it and relaunch on the hosts left with --resume added, at most N times;
#                       train_gpt then continues from the latest committed checkpoint (its --checkpoint-dir on storage
#                       every host sees; --global-batch keeps the rows of a step on fewer ranks). A failure that names
#                       no host (a bad flag, a bug) is not restarted. Each restart is printed with its cause.
set -euo pipefail

die() { echo "launch.sh: $*" >&2; exit 2; }
# An option's value: present, and not the next option.
value() { [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || die "$1 needs a value (see --help)"; }

hostfile="" slurm=0 k="" bind="" tcp=0 dry=0 max_restarts=0 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile) value "$@"; hostfile=$2; shift 2 ;;
    --slurm) slurm=1; shift ;;
    --ranks-per-node) value "$@"; k=$2; shift 2 ;;
    --bind) value "$@"; bind=$2; shift 2 ;;
    --tcp) tcp=1; shift ;;
    --mpi-arg) [ $# -ge 2 ] || die "--mpi-arg needs a value (see --help)"; extra+=("$2"); shift 2 ;;
    --dry-run) dry=1; shift ;;
    --max-restarts) value "$@"; max_restarts=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "launch.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "launch.sh: no program to run: put it after --" >&2; exit 2; }
[ -z "$hostfile" ] || [ "$slurm" = 0 ] || { echo "launch.sh: --hostfile and --slurm exclude each other" >&2; exit 2; }
[[ "$max_restarts" =~ ^[0-9]+$ ]] || die "--max-restarts '$max_restarts' must be a whole number"
[ "$max_restarts" = 0 ] || [ -n "$hostfile" ] ||
  die "--max-restarts needs --hostfile: a restart relaunches on the hosts left when one fails (under Slurm, requeue" \
    "the job instead)"
if [ -n "$hostfile" ]; then
  # Checked before it is read, as the programs check theirs (core/file_checks.h): a FIFO would block grep forever.
  [ -e "$hostfile" ] || die "cannot read hostfile '$hostfile': it does not exist"
  [ -f "$hostfile" ] || die "--hostfile '$hostfile' is not a regular file but a $(stat -L -c %F "$hostfile" 2>/dev/null \
    || echo 'file of another kind') (a FIFO or a device would block the reader)"
  [ -r "$hostfile" ] || die "cannot read hostfile '$hostfile': permission denied"
  [ "$(stat -L -c %s "$hostfile")" -le 1048576 ] || die "--hostfile '$hostfile' has more than 1 MiB: not a hostfile"
fi
# check_hostfile K: each host once (Open MPI would add a twice-listed host's slots together and place ranks unevenly),
# and no slots= below the K ranks launch.sh places on every host (Open MPI would refuse with "not enough slots").
check_hostfile() {
  local line n=0 name slots seen=" "
  while IFS= read -r line; do
    n=$((n + 1))
    [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
    name=$(host_of "$line")
    case "$seen" in *" $name "*) die "--hostfile '$hostfile' lists host '$name' twice (line $n): list each host once;" \
      "--ranks-per-node gives its ranks" ;; esac
    seen+="$name "
    slots=$(sed -n -E 's/.*[[:space:]]slots[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' <<<"$line")
    [ -z "$slots" ] || [ "$slots" -ge "$1" ] || die "--hostfile '$hostfile' line $n gives host '$name' slots=$slots," \
      "fewer than --ranks-per-node $1: drop slots= (launch.sh places --ranks-per-node ranks on every host)"
  done <"$hostfile"
}
host_of() { local w=($1); echo "${w[0]}"; }
if [ -z "$k" ]; then
  if [ -n "${SLURM_NTASKS_PER_NODE:-}" ]; then k=${SLURM_NTASKS_PER_NODE%%(*}
  elif command -v nvidia-smi >/dev/null 2>&1 && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -gt 0 ]; then
    k=$(nvidia-smi -L | wc -l)
  else k=1; fi
fi
[[ "$k" =~ ^[1-9][0-9]*$ ]] || { echo "launch.sh: --ranks-per-node '$k' must be a positive whole number" >&2; exit 2; }
[ -z "$hostfile" ] || check_hostfile "$k"
# Only this machine's cores are known here: more ranks than those, launched here, share cores (no binding).
local_over=0
[ -z "$hostfile" ] && [ "$slurm" = 0 ] && [ "$k" -gt "$(nproc)" ] && local_over=1
[ -z "$bind" ] && { [ "$local_over" = 0 ] && bind=core || bind=none; }
[ "$bind" = core ] || [ "$bind" = none ] || { echo "launch.sh: --bind '$bind' must be core or none" >&2; exit 2; }

strata_vars=()
while IFS= read -r name; do strata_vars+=("$name"); done < <(env | sed -n 's/^\(STRATA_[A-Za-z0-9_]*\)=.*/\1/p' | sort)

# mpirun's command line in cmd, for the hosts of $hostfile (none: this machine); nodes = their number.
mpirun_cmd() {
  nodes=1
  if [ -n "$hostfile" ]; then
    nodes=$(grep -cvE '^[[:space:]]*(#|$)' "$hostfile" || true)  # grep -c exits 1 when it counts 0
    [ "$nodes" -gt 0 ] || die "--hostfile '$hostfile' lists no host (only blank lines and # comments)"
  fi
  cmd=(mpirun -np $((nodes * k)) --map-by "ppr:$k:node" --bind-to "$bind")
  [ -n "$hostfile" ] && cmd+=(--hostfile "$hostfile")
  [ "$(id -u)" = 0 ] && cmd+=(--allow-run-as-root)
  [ "$local_over" = 1 ] && cmd+=(--oversubscribe)
  [ "$tcp" = 1 ] && cmd+=(--mca pml ob1 --mca btl "tcp,self")
  # A host whose link or power is lost: Open MPI's daemons notice through TCP keepalives on their own connections,
  # 8 minutes after the last traffic by default, and mpirun waits that long with every other rank ended. Tied to
  # STRATA_TIMEOUT_S instead, so that the whole job, launcher included, ends within it, naming the host (a busy host's
  # kernel still answers keepalives: no false alarm). An OMPI_MCA_oob_tcp_keepalive_time of the caller's wins.
  if [ -n "$hostfile" ] && [ -z "${OMPI_MCA_oob_tcp_keepalive_time+x}" ]; then
    t=${STRATA_TIMEOUT_S:-600}
    t=${t%%.*}
    [[ "$t" =~ ^[0-9]+$ ]] || t=600
    idle=$((t / 3)) intvl=$((t / 10))
    ((idle < 2)) && idle=2
    ((idle > 60)) && idle=60
    ((intvl < 1)) && intvl=1
    ((intvl > 10)) && intvl=10
    cmd+=(--mca oob_tcp_keepalive_time "$idle" --mca oob_tcp_keepalive_intvl "$intvl" --mca oob_tcp_keepalive_probes 3)
  fi
  for v in "${strata_vars[@]}" NCCL_DEBUG NCCL_SOCKET_IFNAME NCCL_IB_HCA; do
    if [ -n "${!v+x}" ]; then cmd+=(-x "$v"); fi
  done
  cmd+=("${extra[@]}")
}

if [ "$slurm" = 1 ]; then
  [ -n "${SLURM_JOB_ID:-}" ] || { echo "launch.sh: --slurm outside a Slurm allocation (no SLURM_JOB_ID)" >&2; exit 2; }
  nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
  cmd=(srun --mpi=pmix --nodes "$nodes" --ntasks-per-node "$k" --distribution block:block
    "--cpu-bind=$([ "$bind" = core ] && echo cores || echo none)" --export=ALL)
else
  mpirun_cmd
fi
print_cmd() {
  printf 'launch.sh: %d node(s) x %d rank(s):' "$nodes" "$k"
  printf ' %q' "${cmd[@]}"
  printf '\n'
}
if [ "$max_restarts" = 0 ] || [ "$dry" = 1 ]; then
  cmd+=("$@")
  print_cmd
  [ "$dry" = 1 ] && exit 0
  exec "${cmd[@]}"
fi

# ---- Restarts: run, and on a failure that names a host, drop it and run again on the others --------------------
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/strata-launch.XXXXXX")
child="" interrupted=0
trap 'rm -rf "$run_dir"' EXIT
# A signal to the launcher goes to the job (mpirun passes it to the ranks) and ends the restarts.
trap 'interrupted=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null' INT TERM
hostfile_arg=$hostfile
hostfile_lines=()  # the hosts' lines as given (slots and all); a host's name is the first word
while IFS= read -r line; do
  [[ "$line" =~ ^[[:space:]]*(#|$) ]] || hostfile_lines+=("$line")
done <"$hostfile"

# run_logged LOG: the command, its output to this terminal and to LOG; sets status. The output is read through FIFOs
# whose readers are waited for at most 10 s after mpirun ends: a daemon on an unreachable host may hold them open.
run_logged() {
  local log=$1 t
  rm -f "$run_dir/out" "$run_dir/err"
  mkfifo "$run_dir/out" "$run_dir/err"
  tee -a "$log" <"$run_dir/out" &
  local tee_out=$!
  tee -a "$log" <"$run_dir/err" >&2 &
  local tee_err=$!
  "${cmd[@]}" >"$run_dir/out" 2>"$run_dir/err" &
  child=$!
  status=0
  wait "$child" || status=$?
  while kill -0 "$child" 2>/dev/null; do  # a trapped signal ended the first wait early
    status=0
    wait "$child" || status=$?
  done
  child=""
  for ((t = 0; t < 100; t++)); do
    kill -0 "$tee_out" 2>/dev/null || kill -0 "$tee_err" 2>/dev/null || break
    sleep 0.1
  done
  kill "$tee_out" "$tee_err" 2>/dev/null || true
  wait "$tee_out" "$tee_err" 2>/dev/null || true
}

# failed_hosts LOG: the hosts a failed job's output names as gone, one per line, with the line that names each:
# Open MPI's "process rank N ... on node H exited on signal", "Remote daemon: ... on node H" (a daemon lost), and
# Strata's "ranks 2,3 on H never arrived at ..." (ranks silent past STRATA_TIMEOUT_S), and the TCP transport's
# "Peer host: H" (a rank's connection to a host whose daemon died, with its ranks, names the host no other way).
# The "Peer host" lines come last, so that a host named in both ways is put down to the more telling line.
failed_hosts() {
  {
    sed -n -E \
      -e 's/.*process rank [0-9]+ with PID [0-9]+ on node ([^ ]+) exited on signal.*/\1\t&/p' \
      -e 's/.*Remote daemon: *\[\[[0-9,]+\],[0-9]+\] on node ([^ ]+).*/\1\t&/p' \
      -e 's/.*ranks? [0-9,-]+ on ([^ ;]+(, [^ ;]+)*) never arrived at.*/\1\t&/p' "$1"
    sed -n -E 's/^[[:space:]]*Peer host:[[:space:]]*([^ ]+)[[:space:]]*$/\1\tits connection to \1 was lost (Peer host: \1)/p' "$1"
  } |
    while IFS=$'\t' read -r names line; do
      for h in ${names//,/ }; do printf '%s\t%s\n' "$h" "$line"; done
    done
}

# probe_host H: whether mpirun still starts a process on H, within 30 s.
probe_host() {
  local probe=(mpirun -np 1 --host "$1")
  [ "$(id -u)" = 0 ] && probe+=(--allow-run-as-root)
  probe+=("${extra[@]}")
  timeout -k 5 30 "${probe[@]}" true >/dev/null 2>&1 </dev/null
}

resume_arg=()
for a in "$@"; do [ "$a" = --resume ] && resume_arg=(--resume); done
restarts=0
while :; do
  printf '%s\n' "${hostfile_lines[@]}" >"$run_dir/hostfile"
  hostfile=$run_dir/hostfile
  mpirun_cmd
  cmd+=("$@")
  [ "$restarts" = 0 ] || [ ${#resume_arg[@]} -gt 0 ] || cmd+=(--resume)
  print_cmd
  log=$run_dir/attempt-$restarts.log
  : >"$log"
  run_logged "$log"
  [ "$status" = 0 ] && exit 0
  [ "$interrupted" = 0 ] || { echo "launch.sh: interrupted: no restart (status $status)" >&2; exit "$status"; }
  lost=() causes=()
  while IFS=$'\t' read -r h line; do
    [ -n "$h" ] || continue
    known=0
    for i in "${!hostfile_lines[@]}"; do
      name=$(host_of "${hostfile_lines[$i]}")
      # The name as the job reported it, or its short form as a hostfile may give it.
      if [ "$name" = "$h" ] || [ "$name" = "${h%%.*}" ]; then known=1; fi
    done
    [ "$known" = 1 ] || { echo "launch.sh: the job named host '$h' as failed, which is not in $hostfile_arg: no" \
      "restart (status $status)" >&2; exit "$status"; }
    case " ${lost[*]-} " in *" ${h%%.*} "*) ;; *) lost+=("${h%%.*}"); causes+=("$(echo "$line" | sed -e 's/^ *//' -e 's/\.$//')") ;; esac
  done < <(failed_hosts "$log")
  if [ ${#lost[@]} -eq 0 ]; then
    # Nothing named (Open MPI says only "unable to reliably start one or more daemons" when a host's daemon dies):
    # the hosts that no longer start a process are the lost ones.
    for line in "${hostfile_lines[@]}"; do
      h=$(host_of "$line")
      probe_host "$h" || { lost+=("$h"); causes+=("it did not start a process within 30 s after the job failed"); }
    done
  fi
  if [ ${#lost[@]} -eq 0 ]; then
    echo "launch.sh: the job failed (status $status); no host was named as lost and every host answers: no restart" >&2
    exit "$status"
  fi
  if [ "$restarts" -ge "$max_restarts" ]; then
    echo "launch.sh: host(s) ${lost[*]} failed (${causes[0]}); no restart left (--max-restarts $max_restarts)" >&2
    exit "$status"
  fi
  left=()
  for line in "${hostfile_lines[@]}"; do
    name=$(host_of "$line")
    case " ${lost[*]} " in *" ${name%%.*} "*) ;; *) left+=("$line") ;; esac
  done
  if [ ${#left[@]} -eq 0 ]; then
    echo "launch.sh: host(s) ${lost[*]} failed and no host is left to restart on (status $status)" >&2
    exit "$status"
  fi
  hostfile_lines=("${left[@]}")
  restarts=$((restarts + 1))
  echo "launch.sh: restart $restarts of $max_restarts: host(s) ${lost[*]} failed (${causes[0]}); relaunching on" \
    "${#left[@]} host(s) ($(for l in "${left[@]}"; do host_of "$l"; done | paste -sd' ')) x $k rank(s) from the" \
    "latest committed checkpoint (--resume)" >&2
done
