#!/bin/bash
# Faucet controls xbr: hosts on a VLAN ping each other, a host on another
# VLAN reaches neither.
#
#   tests/faucet/run.sh
#
# Faucet (PyPI `faucet`, installed into /var/tmp/xbr-faucet-venv on first
# use) is xbr's only controller (fail mode secure), listening on the
# loopback of a private namespace that also holds three hosts' veths:
# ports 1 and 2 are untagged members of VLAN 100, port 3 of VLAN 200.
# Faucet programs its multi-table pipeline (push_vlan, set_field vlan_vid,
# pop_vlan, packet-in learning, flooding). Exit 0 when the hosts behave as
# the VLANs say; everything started is stopped and removed on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
. scripts/lib.sh
require_root "$0"

FAUCET_VERSION=1.10.12
[ $# -eq 0 ] || { echo "usage: $0 (no arguments)" >&2; exit 2; }
venv=${XBR_FAUCET_VENV:-/var/tmp/xbr-faucet-venv}
if ! "$venv/bin/python" -c "import faucet" 2>/dev/null; then
    log "installing faucet $FAUCET_VERSION into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "faucet==$FAUCET_VERSION"
fi
xbr=$(target_dir)/debug/xbr
[ -x "$xbr" ] || die "$xbr is not built: cargo build -p xbr-daemon --bin xbr"

ns=xbrt-fct-$$
work=$(mktemp -d "${TMPDIR:-/tmp}/xbrt-fct-XXXXXX")
cleanup() {
    set +e
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null; done
    sleep 0.5
    for h in a b c; do
        for pid in $(ip netns pids "$ns-$h" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns del "$ns-$h" 2>/dev/null
    done
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$work/faucet.yaml" <<'EOF'
vlans:
  office:
    vid: 100
  guest:
    vid: 200
dps:
  xbr:
    dp_id: 0x1
    hardware: "Open vSwitch"
    interfaces:
      1:
        native_vlan: office
      2:
        native_vlan: office
      3:
        native_vlan: guest
EOF

ip netns add "$ns"
ip -n "$ns" link set lo up
port=1
for h in a b c; do
    ip netns add "$ns-$h"
    ip -n "$ns" link add "xf$h" type veth peer name eth0 netns "$ns-$h"
    ip -n "$ns" link set "xf$h" up
    ip -n "$ns-$h" link set lo up
    ip -n "$ns-$h" link set eth0 up
    ip -n "$ns-$h" addr add "10.77.0.$port/24" dev eth0
    port=$((port + 1))
done

# Faucet's own entry point execs a manager script os-ken 4.x lacks.
ip netns exec "$ns" env FAUCET_CONFIG="$work/faucet.yaml" FAUCET_LOG="$work/faucet.log" \
    FAUCET_EXCEPTION_LOG="$work/faucet-exception.log" FAUCET_PROMETHEUS_ADDR=127.0.0.1 \
    "$venv/bin/python" "$here/../osken/driver.py" faucet.faucet --ofp-tcp-listen-port 6653 \
    --ofp-listen-host 127.0.0.1 >"$work/faucet.out" 2>&1 &
ip netns exec "$ns" "$xbr" run --bridge br0 --rundir "$work" --port xfa=1 --port xfb=2 --port xfc=3 \
    --datapath-id 0000000000000001 --controller tcp:127.0.0.1:6653 >"$work/xbr.log" 2>&1 &

fail() {
    log "FAILED: $*"
    echo "--- faucet log:" >&2
    tail -30 "$work/faucet.log" >&2 2>/dev/null || tail -30 "$work/faucet.out" >&2
    echo "--- xbr log:" >&2
    tail -20 "$work/xbr.log" >&2
    echo "--- flows:" >&2
    ovs-ofctl -O OpenFlow13 dump-flows "unix:$work/br0.mgmt" >&2 || true
    exit 1
}

# Faucet programs the switch once it connected and saw the ports.
for _ in $(seq 60); do
    if ovs-ofctl -O OpenFlow13 dump-flows "unix:$work/br0.mgmt" 2>/dev/null | grep -q push_vlan; then
        break
    fi
    sleep 0.5
done
ovs-ofctl -O OpenFlow13 dump-flows "unix:$work/br0.mgmt" 2>/dev/null | grep -q push_vlan ||
    fail "Faucet did not program xbr within 30 s"

pings() { ip netns exec "$ns-$1" ping -n -q -c 3 -i 0.2 -W 1 -w 5 "$2" >/dev/null 2>&1; }
pings a 10.77.0.2 || fail "a cannot ping b on VLAN 100"
pings b 10.77.0.1 || fail "b cannot ping a on VLAN 100"
if pings a 10.77.0.3; then fail "a reached c across VLANs"; fi
if pings c 10.77.0.2; then fail "c reached b across VLANs"; fi
learned=$(grep -c "L2 learned" "$work/faucet.log" || true)
[ "$learned" -ge 2 ] || fail "Faucet learned $learned hosts, expected at least 2"
echo "faucet: VLAN 100 hosts reach each other, VLAN 200 is isolated ($learned hosts learned)"
