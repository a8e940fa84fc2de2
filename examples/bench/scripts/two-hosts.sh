#!/usr/bin/env bash
# Two hosts on this machine, for the benchmarks across hosts: network namespaces
# ibis-a (10.78.0.1/24) and ibis-b (10.78.0.2/24) joined by a veth pair. Needs root.
#
#   two-hosts.sh up|down
#
# Example (the IPL and a raw TCP socket over the same veth path, alternating):
#   examples/bench/scripts/two-hosts.sh up
#   ip netns exec ibis-a ./target/release/ipl-bench latency --transport tcp \
#       --address 10.78.0.1 --peer-netns ibis-b
#   examples/bench/scripts/two-hosts.sh down
set -euo pipefail

case "${1:-}" in
up)
    ip netns add ibis-a
    ip netns add ibis-b
    ip -n ibis-a link add eth0 type veth peer name eth0 netns ibis-b
    ip -n ibis-a addr add 10.78.0.1/24 dev eth0
    ip -n ibis-b addr add 10.78.0.2/24 dev eth0
    for ns in ibis-a ibis-b; do
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
    done
    ;;
down)
    ip netns del ibis-a 2>/dev/null || true
    ip netns del ibis-b 2>/dev/null || true
    ;;
*)
    sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
    exit 2
    ;;
esac
