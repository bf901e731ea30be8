#!/usr/bin/env bash
# Real hosts on one machine, for rehearsing a cluster (docs/multi-node.md, "Rehearsing a cluster on one machine").
# Each host is a network namespace with its own interface and address on a private bridge (which has no uplink), and
# each process Open MPI starts there gets its own host name (UTS namespace), its own /dev/shm and its own disk (a mount
# namespace): WORK/disk on a host is WORK/hosts/NAME, which no other host sees. Open MPI reaches the hosts through
# its launcher agent (plm_rsh_agent, a script that enters the namespaces: no ssh) and talks TCP between them.
#
# Usage: scripts/hosts.sh [--hosts N] [--work DIR] -- COMMAND [ARGS...]
#   Makes N hosts (default 2, at most 8) named host0 .. host{N-1}, runs COMMAND in the launcher's namespace (on the
#   bridge, no ranks of its own) with the variables below, then removes every namespace it made, also when COMMAND
#   fails or this script is interrupted. Exits with COMMAND's status; 77 when namespaces cannot be made here (not
#   root, no `ip netns`), saying why.
#     STRATA_HOSTFILE   WORK/hostfile, one host per line, for scripts/launch.sh --hostfile
#     STRATA_HOSTS_CTL  this script's control command: "$STRATA_HOSTS_CTL link-down host1", "kill host1",
#                       "link-up host1", "pids host1"
#     OMPI_MCA_plm_rsh_agent, OMPI_MCA_oob_tcp_if_include, OMPI_MCA_btl_tcp_if_include   for Open MPI
# scripts/hosts.sh --clean removes what a harness killed with SIGKILL left behind (namespaces whose owner is gone).
set -euo pipefail

prefix=strata-hosts  # every namespace made here is named $prefix-<owner pid>-<role>
subnet=10.203.0      # private: the bridge lives in its own namespace, so other harnesses' addresses never meet it

die() { echo "hosts.sh: $*" >&2; exit 2; }

# ---- Control of a running harness (from inside COMMAND) --------------------------------------------------------
if [ "${1:-}" = ctl ]; then
  [ $# -eq 3 ] || die "usage: hosts.sh ctl link-down|link-up|kill|pids HOST"
  [ -n "${STRATA_HOSTS_TAG:-}" ] || die "ctl runs inside a harness (STRATA_HOSTS_TAG is not set)"
  ns=$STRATA_HOSTS_TAG-$3
  ip netns list | grep -q "^$ns\b" || die "no host '$3' in this harness"
  case "$2" in
    link-down) ip -n "$STRATA_HOSTS_TAG-switch" link set "$3" down ;;
    link-up)
      ip -n "$STRATA_HOSTS_TAG-switch" link set "$3" up
      # Back in service before the next job starts: the bridge port forwarding again (bounded), and no neighbour entry
      # left FAILED from while the link was down, which a new connection would wait out (an ARP retry) longer than
      # Open MPI's TCP connect does.
      for _ in $(seq 50); do
        bridge -n "$STRATA_HOSTS_TAG-switch" link show dev "$3" | grep -q "state forwarding" && break
        sleep 0.1
      done
      for h in $(ip netns list | awk -v t="$STRATA_HOSTS_TAG-host" 'index($1, t) == 1 {print $1}'); do
        ip -n "$h" neigh flush all
      done
      ;;
    kill) pids=$(ip netns pids "$ns"); [ -z "$pids" ] || kill -KILL $pids ;;
    pids) ip netns pids "$ns" ;;
    *) die "unknown control '$2' (link-down, link-up, kill, pids)" ;;
  esac
  exit 0
fi

# Removes every namespace of owner TAG, after killing what runs in it (a process keeps a namespace alive, and its
# mounts with it).
remove_tag() {
  local tag=$1 ns pids
  for ns in $(ip netns list 2>/dev/null | awk -v t="$tag-" 'index($1, t) == 1 {print $1}'); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  done
  for ns in $(ip netns list 2>/dev/null | awk -v t="$tag-" 'index($1, t) == 1 {print $1}'); do
    ip netns del "$ns" 2>/dev/null || true
  done
}
remove_stale() {
  local owner
  for owner in $(ip netns list 2>/dev/null | sed -n "s/^$prefix-\([0-9]*\)-.*/\1/p" | sort -u); do
    [ -d "/proc/$owner" ] || remove_tag "$prefix-$owner"
  done
}

n=2 work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) [ $# -ge 2 ] || die "--hosts needs a value"; n=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; work=$2; shift 2 ;;
    --clean) remove_stale; exit 0 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ $# -gt 0 ] || die "no command: put it after --"
[[ "$n" =~ ^[1-8]$ ]] || die "--hosts '$n' must be 1 to 8"
if [ "$(id -u)" != 0 ]; then echo "hosts.sh: skipped: namespaces need root (this is uid $(id -u))"; exit 77; fi
command -v ip >/dev/null && command -v unshare >/dev/null || { echo "hosts.sh: skipped: no ip or unshare"; exit 77; }
[ -n "$work" ] || work=$(mktemp -d /tmp/strata-hosts.XXXXXX)
[ ! -e "$work" ] || [ -d "$work" ] || die "--work '$work' is not a directory (a file or something else is there)"
mkdir -p "$work" 2>/dev/null || die "--work '$work': cannot create the directory"
[ -w "$work" ] || die "--work '$work' is not writable"
work=$(cd "$work" && pwd)

remove_stale
tag=$prefix-$$
cleanup() {
  # Signals are ignored from here: `timeout` and a terminal signal the whole process group, so a second TERM or INT
  # arrives while this runs, and must not cut it short.
  trap - EXIT
  trap '' INT TERM
  remove_tag "$tag"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if ! ip netns add "$tag-switch" 2>/dev/null; then
  echo "hosts.sh: skipped: cannot make a network namespace here (ip netns add failed)"
  exit 77
fi
ip -n "$tag-switch" link add bridge type bridge
ip -n "$tag-switch" link set bridge up
# A host's end of its link is eth0 in its namespace; the switch's end is named after the host.
add_host() {  # add_host ROLE ADDRESS
  ip netns add "$tag-$1"
  ip link add eth0 netns "$tag-$1" type veth peer name "$1" netns "$tag-switch"
  ip -n "$tag-switch" link set "$1" master bridge up
  ip -n "$tag-$1" addr add "$2/24" dev eth0
  ip -n "$tag-$1" link set eth0 up
  ip -n "$tag-$1" link set lo up
}
add_host launcher "$subnet.1"
: >"$work/hostfile"
mkdir -p "$work/disk"
for ((h = 0; h < n; h++)); do
  add_host "host$h" "$subnet.$((h + 10))"
  mkdir -p "$work/hosts/host$h"
  echo "host$h" >>"$work/hostfile"
done

# The launcher agent: Open MPI runs `agent HOST COMMAND...` where it would run ssh, and COMMAND is a shell command
# line, as ssh would hand it to the remote shell.
cat >"$work/agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
exec ip netns exec "$tag-\$host" unshare --uts --mount --propagation private sh -c '
  hostname "\$1" && mount -t tmpfs -o size=4g tmpfs /dev/shm && mount --bind "$work/hosts/\$1" "$work/disk" &&
  exec sh -c "\$2"' agent "\$host" "\$*"
EOF
chmod +x "$work/agent.sh"

export STRATA_HOSTFILE=$work/hostfile STRATA_HOSTS_TAG=$tag
export STRATA_HOSTS_CTL="$(cd "$(dirname "$0")" && pwd)/hosts.sh ctl"
export OMPI_MCA_plm_rsh_agent=$work/agent.sh
export OMPI_MCA_oob_tcp_if_include=$subnet.0/24 OMPI_MCA_btl_tcp_if_include=$subnet.0/24
echo "hosts.sh: $n host(s) ($(paste -sd' ' "$work/hostfile")) on $subnet.0/24; disks under $work/hosts"
# In the background, so that a signal to this script alone is acted on at once (bash runs traps only between
# foreground commands); the cleanup kills COMMAND with everything else in the namespaces.
ip netns exec "$tag-launcher" "$@" <&0 &
status=0
wait $! || status=$?
exit "$status"
