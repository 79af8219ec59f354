# tests/cluster/lib.sh - pieces of the failover lab, sourced by failover.sh (host client) and
# guest.sh (the kernel client in the guest lab). Everything is private to one run:
#
#   netns $FO_LAB (lab)        bridge br0 10.77.0.1/24: Ceph (mon, osd, mds) and a 3-member etcd
#     |                        (ports 2379/2479/2579) listen here; tap0 (the guest) on the bridge
#     |-- veth -- netns $FO_NS_A  eth0 10.77.0.11/24  head A  (+ the service address 10.77.0.10 first)
#     |-- veth -- netns $FO_NS_B  eth0 10.77.0.12/24  head B
#     `-- veth -- netns $FO_NS_C  eth0 10.77.0.21/24  host-side clients (tarn failover-hold/-probe)
#
# No namespace has a default route or a link to the host's namespace. Every process is started
# in the background with its PID recorded in $FO_DIR/pids and stopped by PID in fo_cleanup,
# which also deletes the namespaces; callers run fo_cleanup from an EXIT trap.
#
# Needs: iproute2, iputils-arping (gratuitous ARP), etcd-server + etcd-client (etcdctl), the
# Ceph daemons (scripts/ceph-cluster.sh), python3, a release tarn ($TARN_BIN).

FO_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TARN_BIN=${TARN_BIN:-$FO_REPO/target/release/tarn}
FO_NET=10.77.0
FO_LAB_IP=$FO_NET.1 FO_GUEST_IP=$FO_NET.2 FO_SVC=$FO_NET.10
FO_A_IP=$FO_NET.11 FO_B_IP=$FO_NET.12 FO_C_IP=$FO_NET.21
FO_ETCD_PORTS="2379 2479 2579"
FO_ETCD_LEASE=${FO_ETCD_LEASE:-2}     # [cluster] lease_seconds: the failure detection time
FO_GRACE=${FO_GRACE:-60}              # [nfs4] grace_seconds: the bound, not what a failover waits
FO_LEASE=${FO_LEASE:-30}              # [nfs4] lease_seconds (NFSv4 client leases)

fo_log() { printf '[%s] %s\n' "$(date +%T.%3N)" "$*"; }
fo_ms() { echo $(( $(date +%s%N) / 1000000 )); }
fo_die() { fo_log "FAIL: $*"; exit 1; }

# fo_init DIR: names for this run (the namespaces carry our PID so concurrent runs never meet).
fo_init() {
  FO_DIR=$1; mkdir -p "$FO_DIR"; : >"$FO_DIR/pids"
  FO_LAB=tfo-lab-$$ FO_NS_A=tfo-a-$$ FO_NS_B=tfo-b-$$ FO_NS_C=tfo-c-$$
  FO_ETCD_URLS=$(for p in $FO_ETCD_PORTS; do printf 'http://%s:%s,' "$FO_LAB_IP" "$p"; done)
  FO_ETCD_URLS=${FO_ETCD_URLS%,}
}

# fo_bg NAME CMD...: runs CMD in the background, output in $FO_DIR/NAME.log, PID recorded.
fo_bg() {
  local name=$1; shift
  "$@" >>"$FO_DIR/$name.log" 2>&1 &
  echo "$! $name" >>"$FO_DIR/pids"
  eval "FO_PID_${name//[^A-Za-z0-9]/_}=$!"
}
fo_pid() { local v="FO_PID_${1//[^A-Za-z0-9]/_}"; echo "${!v:-}"; }

fo_stop_pid() {  # PID: TERM, up to 5 s, then KILL
  local p=$1
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 0
  kill -TERM "$p" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null; return 0
}

fo_cleanup() {
  local p _n
  [ -n "${FO_DIR:-}" ] || return 0
  touch "$FO_DIR/stop-probes"   # a probe loop ends after its current probe
  if [ -f "$FO_DIR/pids" ]; then
    # Newest first: clients and heads before etcd.
    tac "$FO_DIR/pids" | while read -r p _n; do fo_stop_pid "$p"; done
  fi
  # Every step even if one fails (this runs from EXIT traps, maybe under set -e).
  if [ -f "$FO_DIR/ceph/pids" ]; then bash "$FO_REPO/scripts/ceph-cluster.sh" stop "$FO_DIR/ceph" || true; fi
  for ns in ${FO_NS_A:-} ${FO_NS_B:-} ${FO_NS_C:-} ${FO_LAB:-}; do
    if ip netns list | awk '{print $1}' | grep -qxF "$ns"; then ip netns del "$ns" || true; fi
  done
  return 0
}

# ---- network -------------------------------------------------------------------------------------
fo_link_head() {  # NS IP: a namespace joined to the lab bridge by a veth pair (eth0 inside)
  local ns=$1 ip=$2 br=v-${1:4:1}
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$FO_LAB" link add "$br" type veth peer name eth0 netns "$ns"
  ip -n "$FO_LAB" link set "$br" master br0 up
  ip -n "$ns" addr add "$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
}

fo_net_up() {
  ip netns add "$FO_LAB"
  ip -n "$FO_LAB" link set lo up
  ip -n "$FO_LAB" link add br0 type bridge
  ip -n "$FO_LAB" addr add "$FO_LAB_IP/24" dev br0
  ip -n "$FO_LAB" link set br0 up
  # The guest's tap, on the bridge and without an address (net.sh, run by boot.sh, finds it
  # present and leaves it so).
  ip -n "$FO_LAB" tuntap add dev tap0 mode tap
  ip -n "$FO_LAB" link set tap0 master br0 up
  fo_link_head "$FO_NS_A" "$FO_A_IP"
  fo_link_head "$FO_NS_B" "$FO_B_IP"
  fo_link_head "$FO_NS_C" "$FO_C_IP"
  # IPv4 only: no IPv6 router solicitations or address checks on the lab's links. (The bridge
  # has STP off, Linux's default, so its ports forward at once.)
  ip netns exec "$FO_LAB" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
}

# fo_svc_add NS / fo_svc_del NS: the service address, as keepalived or IPaddr2 moves it: added
# with a gratuitous ARP (unsolicited, twice) so every neighbour cache on the bridge follows now.
fo_svc_add() {
  ip -n "$1" addr add "$FO_SVC/24" dev eth0
  FO_SVC_ADDED=$(fo_ms)
  # Two, a second apart, as keepalived sends several: in the background, not waited for.
  fo_bg "garp-$1" ip netns exec "$1" arping -q -U -c 2 -I eth0 "$FO_SVC"
}
fo_svc_del() { ip -n "$1" addr del "$FO_SVC/24" dev eth0 2>/dev/null || true; }

# ---- etcd: three members on the lab bridge ---------------------------------------------------------
fo_etcd_up() {
  local i=0 p cluster="" m
  for p in $FO_ETCD_PORTS; do cluster+="e$i=http://$FO_LAB_IP:$((p + 1)),"; i=$((i + 1)); done
  cluster=${cluster%,}
  i=0
  for p in $FO_ETCD_PORTS; do
    m=e$i
    fo_bg "etcd-$m" ip netns exec "$FO_LAB" etcd --name "$m" --data-dir "$FO_DIR/etcd/$m" \
      --listen-client-urls "http://$FO_LAB_IP:$p" --advertise-client-urls "http://$FO_LAB_IP:$p" \
      --listen-peer-urls "http://$FO_LAB_IP:$((p + 1))" \
      --initial-advertise-peer-urls "http://$FO_LAB_IP:$((p + 1))" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "tfo-$$" \
      --heartbeat-interval 100 --election-timeout 1000
    i=$((i + 1))
  done
  for _ in $(seq 150); do
    fo_etcdctl endpoint health >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  fo_die "etcd: no healthy 3-member cluster after 30 s (logs: $FO_DIR/etcd-e*.log)"
}
fo_etcdctl() { ETCDCTL_API=3 ip netns exec "$FO_LAB" etcdctl --endpoints "$FO_ETCD_URLS" --command-timeout 5s "$@"; }

# ---- Ceph ------------------------------------------------------------------------------------------
fo_ceph_up() {
  local out
  out=$(CEPH_ADDR=$FO_LAB_IP ip netns exec "$FO_LAB" bash "$FO_REPO/scripts/ceph-cluster.sh" start "$FO_DIR/ceph") ||
    fo_die "ceph cluster did not start (logs in $FO_DIR/ceph/log)"
  FO_CEPH_CONF=${out#CEPH_CONF=}
}
fo_ceph() { ip netns exec "$FO_LAB" timeout 30 ceph -c "$FO_CEPH_CONF" "$@"; }

# ---- heads ------------------------------------------------------------------------------------------
fo_head_config() {  # NODE IP
  local node=$1
  mkdir -p "$FO_DIR/state-$node"
  cat >"$FO_DIR/$node.toml" <<EOF
# Head $node: listens on every address of its namespace (its own and, when it holds it, the
# service address).
listen = "0.0.0.0:2049"
state_dir = "$FO_DIR/state-$node"

[[export]]
path = "cephfs:///"
ceph_conf = "$FO_CEPH_CONF"
pseudo = "/"
clients = ["$FO_NET.0/24"]
squash = "none"

[nfs4]
grace_seconds = $FO_GRACE
lease_seconds = $FO_LEASE

[cluster]
etcd = [$(for p in $FO_ETCD_PORTS; do printf '"http://%s:%s",' "$FO_LAB_IP" "$p"; done | sed 's/,$//')]
node = "$node"
name = "tfo"
lease_seconds = $FO_ETCD_LEASE
# What NFSv3 clients mounted: a head's SM_NOTIFY names the server so, from whichever address
# it leaves (the guest's statd ignores a notice about a server it does not monitor).
service_names = ["$FO_SVC"]
EOF
}

# fo_head_start NODE NS: starts `tarn serve` in NS; returns once it prints that it serves.
fo_head_start() {
  local node=$1 ns=$2
  : >"$FO_DIR/$node.out"
  ip netns exec "$ns" "$TARN_BIN" serve --config "$FO_DIR/$node.toml" \
    --log-level "${TARN_LOG_LEVEL:-info}" >"$FO_DIR/$node.out" 2>>"$FO_DIR/$node.log" &
  echo "$! tarn-$node" >>"$FO_DIR/pids"
  eval "FO_PID_tarn_$node=$!"
  for _ in $(seq 600); do
    grep -q '^tarn: exporting' "$FO_DIR/$node.out" && return 0
    kill -0 "$(fo_pid "tarn-$node")" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$FO_DIR/$node.log"
  fo_die "head $node did not start (log: $FO_DIR/$node.log)"
}

# fo_rpcbind NS: rpcbind in NS, with a private /run (its socket path would clash with the host's
# rpcbind otherwise), for NFSv3 clients' lockd: a head registers NLM with it when it starts.
fo_rpcbind() {
  fo_bg "rpcbind-$1" ip netns exec "$1" unshare --mount --propagation private -- bash -c \
    'mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -p /run/rpcbind && exec rpcbind -w -f'
  for _ in $(seq 50); do
    ip netns exec "$1" ss -Htln "sport = :111" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  fo_die "rpcbind in $1 is not listening after 5 s"
}

# fo_heads_up: A, then B with A's handle key and export ids (handles valid on both heads).
# FO_RPCBIND=1: rpcbind in both heads' namespaces first (NFSv3 with NLM).
fo_heads_up() {
  fo_head_config a; fo_head_config b
  if [ "${FO_RPCBIND:-0}" = 1 ]; then fo_rpcbind "$FO_NS_A"; fo_rpcbind "$FO_NS_B"; fi
  fo_head_start a "$FO_NS_A"
  cp "$FO_DIR/state-a/handle.key" "$FO_DIR/state-a/export-ids" "$FO_DIR/state-b/"
  fo_head_start b "$FO_NS_B"
}

# fo_grace_record: the cluster's shared grace record (first line "current recovery deadline",
# then "node lease_until need_grace enforcing lost" per head).
fo_grace_record() { fo_etcdctl get --print-value-only /tarn/tfo/grace 2>/dev/null; }

# fo_failover: head A dies (SIGKILL) and the service address moves to B, in the order a failover
# manager must keep (docs/cluster.md): wait until the cluster has declared A lost and every live
# head enforces the grace (scripts/tarn-takeover.sh; the head that declares A lost also ends A's
# CephFS sessions), then move the address. Sets T_KILL, T_READY, T_MOVED (ms since the epoch).
# $1: a file to create right after the kill. A hook, if the caller defines it: fo_before_move.
fo_failover() {
  kill -KILL "$(fo_pid tarn-a)"
  T_KILL=$(fo_ms)
  [ -n "${1:-}" ] && echo "$T_KILL" >"$1"
  wait "$(fo_pid tarn-a)" 2>/dev/null || true
  fo_log "head a SIGKILLed"
  # What a failover manager runs before it moves the address (the production script).
  if ! ip netns exec "$FO_LAB" bash "$FO_REPO/scripts/tarn-takeover.sh" --etcd "$FO_ETCD_URLS" \
      --cluster tfo --failed a --unless-alive "$FO_A_IP" --self b --timeout 30 >"$FO_DIR/takeover.out" 2>&1; then
    cat "$FO_DIR/takeover.out"
    fo_die "takeover not ready ($(fo_grace_record | tr '\n' ';'))"
  fi
  T_READY=$(fo_ms)
  while read -r l; do fo_log "$l"; done <"$FO_DIR/takeover.out"
  if declare -F fo_before_move >/dev/null; then fo_before_move; fi
  fo_svc_del "$FO_NS_A"
  fo_svc_add "$FO_NS_B"
  T_MOVED=$FO_SVC_ADDED
  fo_log "service address moved to b ($(( T_MOVED - T_KILL )) ms after the kill)"
}

# fo_probe ADDR FILE: another NFSv4.1 client tries a write lock on FILE (export root) through
# ADDR once: prints GRANTED (released at once), DENIED or GRACE.
fo_probe() {
  ip netns exec "$FO_NS_C" timeout 30 "$TARN_BIN" failover-probe "$1:2049" --name "$2" \
    2>>"$FO_DIR/probe.err" || true
}

# fo_wait_grace_over FILE: probes b until it answers other than GRACE (at most the grace bound
# and 10 s); prints it.
fo_wait_grace_over() {
  local r=GRACE
  for _ in $(seq $(( (FO_GRACE + 10) * 5 ))); do r=$(fo_probe "$FO_B_IP" "$1"); [ "$r" = GRACE ] || break; sleep 0.2; done
  echo "$r"
}

# fo_wait_heads_recovered: the heads' start-up grace is over (both registered, none in grace).
fo_wait_heads_recovered() {
  for _ in $(seq 300); do
    fo_grace_record | awk 'NR == 1 { r = $2 } END { exit !(NR >= 3 && r == 0) }' && return 0
    sleep 0.2
  done
  fo_die "the heads' start-up grace did not end in 60 s"
}
