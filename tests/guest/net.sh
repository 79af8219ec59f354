#!/bin/bash
# tests/guest/net.sh up|down|status NETNS - host side of the guest-lab network.
# `up` creates network namespace NETNS holding tap device $TAP (default tap0) = 10.77.0.1/24.
# The guest NIC (virtio-net on that tap) is 10.77.0.2/24.  Nothing is routed anywhere: the
# namespace has only lo + the tap, no default route, no veth to the root namespace.
# Use a unique name per run (e.g. tarnlab-$$); `down` deletes the namespace (and with it the tap).
set -euo pipefail
ACTION=${1:-status}; NETNS=${2:-${NETNS:-}}
TAP=${TAP:-tap0}; HOSTIP=${HOSTIP:-10.77.0.1/24}
[ -n "$NETNS" ] || { echo "usage: $0 up|down|status NETNS" >&2; exit 2; }
exists() { ip netns list | awk '{print $1}' | grep -qxF "$NETNS"; }
case "$ACTION" in
  up)
    exists || ip netns add "$NETNS"
    ip -n "$NETNS" link set lo up
    if ! ip -n "$NETNS" link show "$TAP" >/dev/null 2>&1; then
      ip -n "$NETNS" tuntap add dev "$TAP" mode tap
      ip -n "$NETNS" addr add "$HOSTIP" dev "$TAP"
    fi
    ip -n "$NETNS" link set "$TAP" up
    ;;
  down)
    if exists; then ip netns del "$NETNS"; fi
    ;;
  status)
    exists || { echo "netns $NETNS absent"; exit 1; }
    ip -n "$NETNS" -br addr; ip -n "$NETNS" route
    ;;
  *) echo "usage: $0 up|down|status NETNS" >&2; exit 2;;
esac
