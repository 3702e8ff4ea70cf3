#!/usr/bin/env bash
# Test hosts on one machine: N network namespaces ("hosts") joined by a bridge, each with its own
# address, for running braid's ranks across hosts (MPI over TCP between namespaces, shared memory
# inside one) with `braid launch --hostfile`.
#
#   scripts/netns/hosts.sh up N [SLOTS]   create hosts h1..hN (SLOTS ranks each, default 2),
#                                        print the hostfile's path
#   scripts/netns/hosts.sh down           remove them
#   scripts/netns/hosts.sh link h2 down|up  cut or restore one host's link
#   scripts/netns/hosts.sh rate RATE        every host sends at most RATE (tc's units: 4gbit,
#                                        500mbit), like a network slower than this machine's
#                                        copies; "rate off" lifts it
#   scripts/netns/hosts.sh outside          give every host a second network (192.168.77.0/24,
#                                        a veth pair inside it) that is not the job's
#   scripts/netns/hosts.sh check          exit 0 when namespaces can be made here, else say why
#
# Layout (BRAID_NETNS_SUBNET, default 10.77.0): bridge braidbr0 in this namespace at .254, host
# hI in namespace braid-hI at .I, reached through veth braid-vI (this side) / eth0 (its side).
# The hostfile (BRAID_NETNS_DIR, default /run/braid-netns) names the hosts (hostfile-by-address
# beside it gives their addresses, from which braid launch derives the job's network), and
# scripts/netns/rsh is the launch agent that starts a program "on" one: inside its namespace,
# with its own hostname (a UTS namespace), as ssh would on a real host.
set -euo pipefail

SUBNET=${BRAID_NETNS_SUBNET:-10.77.0}
DIR=${BRAID_NETNS_DIR:-/run/braid-netns}
BRIDGE=braidbr0

die() { echo "hosts.sh: $*" >&2; exit 1; }

check() {
  [ "$(id -u)" -eq 0 ] || { echo "network namespaces need root (uid $(id -u))"; return 1; }
  command -v ip >/dev/null || { echo "ip (iproute2) is not installed"; return 1; }
  local probe=braid-probe-$$
  ip netns add "$probe" 2>/dev/null || { echo "ip netns add fails here (no CAP_SYS_ADMIN?)"; return 1; }
  ip netns del "$probe"
  ip link add bprobe$$ type bridge 2>/dev/null || { echo "cannot create a bridge here"; return 1; }
  ip link del bprobe$$
}

down() {
  # The veths first: a namespace that a dying process still holds would keep its pair alive.
  for v in $(ip -o link show | awk -F': ' '$2 ~ /^braid-v[0-9]+@/ {sub(/@.*/, "", $2); print $2}'); do
    ip link del "$v" 2>/dev/null || true
  done
  for ns in $(ip netns list | awk '/^braid-h[0-9]+/ {print $1}'); do ip netns del "$ns"; done
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$DIR"
}

up() {
  local n=$1 slots=${2:-2}
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 16 ] || die "up: N must be 1..16, got '$n'"
  [[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "up: SLOTS must be >= 1, got '$slots'"
  why=$(check) || die "$why"
  down
  mkdir -p "$DIR"
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  : > "$DIR/hostfile"
  : > "$DIR/hostfile-by-address"
  for i in $(seq "$n"); do
    local ns=braid-h$i veth=braid-v$i
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$ns" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    echo "h$i slots=$slots" >> "$DIR/hostfile"
    echo "$SUBNET.$i slots=$slots" >> "$DIR/hostfile-by-address"
  done
  echo "$DIR/hostfile"
}

link() {
  local host=$1 state=$2
  [[ $host =~ ^h([0-9]+)$ ]] || die "link: host must be hN, got '$host'"
  [[ $state == up || $state == down ]] || die "link: state must be up or down, got '$state'"
  ip link set "braid-v${BASH_REMATCH[1]}" "$state"
}

rate() {
  local r=$1
  [[ $r == off || $r =~ ^[0-9]+[kmg]?bit$ ]] || die "rate: RATE must be like 4gbit or off, got '$r'"
  command -v tc >/dev/null || die "rate: tc (iproute2) is not installed"
  for ns in $(ip netns list | awk '/^braid-h[0-9]+/ {print $1}'); do
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
    [ "$r" = off ] || tc -n "$ns" qdisc add dev eth0 root tbf rate "$r" burst 512kb latency 100ms
  done
}

outside() {
  for ns in $(ip netns list | awk '/^braid-h[0-9]+/ {print $1}'); do
    local i=${ns#braid-h}
    ip -n "$ns" link add out0 type veth peer name out1
    ip -n "$ns" addr add "192.168.77.$i/24" dev out0
    ip -n "$ns" link set out0 up
    ip -n "$ns" link set out1 up
  done
}

case ${1:-} in
  outside) outside ;;
  up) shift; up "$@" ;;
  down) down ;;
  link) shift; [ $# -eq 2 ] || die "usage: hosts.sh link hN up|down"; link "$@" ;;
  rate) shift; [ $# -eq 1 ] || die "usage: hosts.sh rate RATE|off"; rate "$1" ;;
  check) check ;;
  *) die "usage: hosts.sh up N [SLOTS] | down | link hN up|down | rate RATE|off | outside | check" ;;
esac
