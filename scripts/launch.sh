#!/usr/bin/env bash
# Launches a Strata program on one or more nodes through the job's MPI (docs/multi-node.md): Open MPI's mpirun with a
# hostfile, Slurm's srun inside an allocation, or mpirun on this machine. Every STRATA_* variable of this shell reaches
# every rank, ranks are placed node by node (ranks k x K .. k x K + K - 1 on node k, which --dp-shard node and the tp
# groups rely on), and the command is printed before it runs.
#
# Usage: scripts/launch.sh [--hostfile FILE | --slurm] [--ranks-per-node K] [--bind core|none] [--tcp] [--dry-run]
#                          [--mpi-arg ARG]... -- PROGRAM [ARGS...]
#   --hostfile FILE     Open MPI hostfile (one host per line; "slots=" is ignored in favour of --ranks-per-node)
#   --slurm             srun --mpi=pmix in the current allocation (K defaults to SLURM_NTASKS_PER_NODE)
#   --ranks-per-node K  ranks on each node (default: SLURM_NTASKS_PER_NODE, else the GPUs nvidia-smi lists, else 1)
#   --bind core|none    bind each rank to cores (default core; none when more ranks than cores run on this machine)
#   --tcp               Open MPI over TCP only (pml ob1, btl tcp,self): no shared memory, no InfiniBand
#   --mpi-arg ARG       one more argument for mpirun (repeatable), e.g. --mpi-arg --mca --mpi-arg btl_tcp_if_include
#   --dry-run           print the command, do not run it
set -euo pipefail

die() { echo "launch.sh: $*" >&2; exit 2; }
# An option's value: present, and not the next option.
value() { [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || die "$1 needs a value (see --help)"; }

hostfile="" slurm=0 k="" bind="" tcp=0 dry=0 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile) value "$@"; hostfile=$2; shift 2 ;;
    --slurm) slurm=1; shift ;;
    --ranks-per-node) value "$@"; k=$2; shift 2 ;;
    --bind) value "$@"; bind=$2; shift 2 ;;
    --tcp) tcp=1; shift ;;
    --mpi-arg) [ $# -ge 2 ] || die "--mpi-arg needs a value (see --help)"; extra+=("$2"); shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "launch.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "launch.sh: no program to run: put it after --" >&2; exit 2; }
[ -z "$hostfile" ] || [ "$slurm" = 0 ] || { echo "launch.sh: --hostfile and --slurm exclude each other" >&2; exit 2; }
if [ -n "$hostfile" ]; then
  # Checked before it is read, as the programs check theirs (core/file_checks.h): a FIFO would block grep forever.
  [ -e "$hostfile" ] || die "cannot read hostfile '$hostfile': it does not exist"
  [ -f "$hostfile" ] || die "--hostfile '$hostfile' is not a regular file but a $(stat -L -c %F "$hostfile" 2>/dev/null \
    || echo 'file of another kind') (a FIFO or a device would block the reader)"
  [ -r "$hostfile" ] || die "cannot read hostfile '$hostfile': permission denied"
  [ "$(stat -L -c %s "$hostfile")" -le 1048576 ] || die "--hostfile '$hostfile' has more than 1 MiB: not a hostfile"
fi
if [ -z "$k" ]; then
  if [ -n "${SLURM_NTASKS_PER_NODE:-}" ]; then k=${SLURM_NTASKS_PER_NODE%%(*}
  elif command -v nvidia-smi >/dev/null 2>&1 && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -gt 0 ]; then
    k=$(nvidia-smi -L | wc -l)
  else k=1; fi
fi
[[ "$k" =~ ^[1-9][0-9]*$ ]] || { echo "launch.sh: --ranks-per-node '$k' must be a positive whole number" >&2; exit 2; }
# Only this machine's cores are known here: more ranks than those, launched here, share cores (no binding).
local_over=0
[ -z "$hostfile" ] && [ "$slurm" = 0 ] && [ "$k" -gt "$(nproc)" ] && local_over=1
[ -z "$bind" ] && { [ "$local_over" = 0 ] && bind=core || bind=none; }
[ "$bind" = core ] || [ "$bind" = none ] || { echo "launch.sh: --bind '$bind' must be core or none" >&2; exit 2; }

strata_vars=()
while IFS= read -r name; do strata_vars+=("$name"); done < <(env | sed -n 's/^\(STRATA_[A-Za-z0-9_]*\)=.*/\1/p' | sort)

if [ "$slurm" = 1 ]; then
  [ -n "${SLURM_JOB_ID:-}" ] || { echo "launch.sh: --slurm outside a Slurm allocation (no SLURM_JOB_ID)" >&2; exit 2; }
  nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
  cmd=(srun --mpi=pmix --nodes "$nodes" --ntasks-per-node "$k" --distribution block:block
    "--cpu-bind=$([ "$bind" = core ] && echo cores || echo none)" --export=ALL)
else
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
fi
cmd+=("$@")
printf 'launch.sh: %d node(s) x %d rank(s):' "$nodes" "$k"
printf ' %q' "${cmd[@]}"
printf '\n'
[ "$dry" = 1 ] && exit 0
exec "${cmd[@]}"
