#!/bin/bash
# os-ken's "OpenFlow Switch Test Tool" with xbr as the target switch.
#
#   tests/osken/run.sh [--target xbr|ovs] [--only REGEX] [--min CATEGORY=N]...
#                      [--timeout SECS] [CATEGORY...]
#
# CATEGORY is one of os-ken's OF1.3 test sets (match, action, set_field,
# group, meter; default: all five; set_field is action/25_SET_FIELD, which
# action then leaves out). --only keeps the test files
# whose path matches REGEX (a reduced run). Prints "CATEGORY OK/TOTAL" per
# category and the tester's log lines of every failed test; with --min,
# exits 1 if a category scores below N. --target ovs runs the same with
# OVS 3.1 (netdev) as the target, for comparison. XBR_OSKEN_LOGS=DIR keeps
# there the tester's full log per category, the tester switch's counters
# and log, the links' counters and xbr's log.
#
# The topology lives in a private network namespace: target ports 1-3 are
# veth pairs to tester ports 1-3 (the tester's defaults: it sends on its
# port 1 into the target's port 1 and receives what the target sends on
# ports 2 and 3). The tester switch is OVS (netdev datapath, dpid 2); the
# controller (tests/osken/driver.py) listens on the namespace's loopback.
# OVS as the target gets a second namespace (see ns_target). Everything
# started is stopped and removed on exit, also on failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
. scripts/lib.sh
require_root "$0"

OSKEN_VERSION=4.2.2
target=xbr
only=
timeout_s=1500
declare -A min=()
categories=()
usage() {
    echo "usage: $0 [--target xbr|ovs] [--only REGEX] [--min CATEGORY=N]... [--timeout SECS] [CATEGORY...]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
        --target) [ $# -ge 2 ] || usage; target=$2; shift 2 ;;
        --only) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
        --timeout) [ $# -ge 2 ] || usage; timeout_s=$2; shift 2 ;;
        --min)
            [ $# -ge 2 ] && [[ $2 =~ ^[a-z_]+=[0-9]+$ ]] || { echo "--min wants CATEGORY=N, got '${2:-}'" >&2; exit 2; }
            min[${2%%=*}]=${2#*=}
            shift 2
            ;;
        -h | --help) usage ;;
        -*) echo "unknown option $1" >&2; usage ;;
        *) categories+=("$1"); shift ;;
    esac
done
case $target in xbr | ovs) ;; *) echo "--target must be xbr or ovs, got '$target'" >&2; exit 2 ;; esac
[[ $timeout_s =~ ^[0-9]+$ ]] || { echo "--timeout wants seconds, got '$timeout_s'" >&2; exit 2; }
[ ${#categories[@]} -gt 0 ] || categories=(match action set_field group meter)
for c in "${categories[@]}"; do
    case $c in match | action | set_field | group | meter) ;; *) echo "unknown category '$c'" >&2; exit 2 ;; esac
done
for c in "${!min[@]}"; do
    [[ " ${categories[*]} " == *" $c "* ]] || { echo "--min names '$c', which is not run" >&2; exit 2; }
done

# os-ken in a virtualenv of its own, kept between runs.
venv=${XBR_OSKEN_VENV:-/var/tmp/xbr-osken-venv}
if ! "$venv/bin/python" -c "import os_ken" 2>/dev/null; then
    log "installing os-ken $OSKEN_VERSION into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "os-ken==$OSKEN_VERSION"
fi
cases=$("$venv/bin/python" -c "import os, os_ken; print(os.path.dirname(os_ken.__file__))")/tests/switch/of13

if [ "$target" = xbr ]; then
    xbr=$(target_dir)/debug/xbr
    [ -x "$xbr" ] || die "$xbr is not built: cargo build -p xbr-daemon --bin xbr"
fi

id=$$
ns=xbrt-osk-$id
# OVS as the target runs in a namespace of its own: two netdev datapaths
# in one namespace would both create the tap device "ovs-netdev".
ns_target=xbrt-osk-$id-t
work=$(mktemp -d "${TMPDIR:-/tmp}/xbrt-osk-XXXXXX")
xbr_pid=
cleanup() {
    set +e
    if [ -n "${XBR_OSKEN_LOGS:-}" ] && [ -S "$work/tester/ovs-vswitchd.ctl" ]; then
        mkdir -p "$XBR_OSKEN_LOGS"
        for cmd in coverage/show dpctl/show\ -s upcall/show dpctl/dump-flows; do
            echo "== $cmd"
            # shellcheck disable=SC2086 # the command's words
            ovs-appctl -t "$work/tester/ovs-vswitchd.ctl" $cmd
        done >"$XBR_OSKEN_LOGS/tester-ovs.txt" 2>&1
        inns ip -s -s link >"$XBR_OSKEN_LOGS/links.txt" 2>&1
        cp "$work/tester/ovs-vswitchd.log" "$XBR_OSKEN_LOGS/tester-ovs-vswitchd.log" 2>/dev/null
        [ -f "$work/xbr.log" ] && cp "$work/xbr.log" "$XBR_OSKEN_LOGS/"
    fi
    [ -n "$xbr_pid" ] && kill "$xbr_pid" 2>/dev/null && wait "$xbr_pid" 2>/dev/null
    for d in tester target; do
        for p in ovs-vswitchd ovsdb-server; do
            [ -f "$work/$d/$p.pid" ] && kill "$(cat "$work/$d/$p.pid")" 2>/dev/null
        done
    done
    for n in "$ns" "$ns_target"; do
        for pid in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns del "$n" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

inns() { ip netns exec "$ns" "$@"; }
add_ns() {
    ip netns add "$1"
    ip netns exec "$1" ip link set lo up
    # No IPv6 on the test links: router and neighbour solicitations would
    # be extra packets in the tester's counts.
    ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}
add_ns "$ns"
target_ns=$ns
controller=127.0.0.1
if [ "$target" = ovs ]; then
    target_ns=$ns_target
    add_ns "$target_ns"
    # The target reaches the controller over a link of its own.
    inns ip link add xc0 type veth peer name xc1 netns "$target_ns"
    inns ip addr add 10.255.0.1/30 dev xc0
    inns ip link set xc0 up
    ip netns exec "$target_ns" ip addr add 10.255.0.2/30 dev xc1
    ip netns exec "$target_ns" ip link set xc1 up
    controller=10.255.0.1
fi
for i in 1 2 3; do
    inns ip link add "xs$i" type veth peer name "xt$i" netns "$target_ns"
    inns ip link set "xs$i" up
    ip netns exec "$target_ns" ip link set "xt$i" up
done

# An OVS instance with private directories, as dpid $2 with ports $3-pairs,
# in namespace $4.
start_ovs() {
    local d=$work/$1 dpid=$2 side=$3 in=(ip netns exec "$4")
    mkdir -p "$d"
    ovsdb-tool create "$d/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    # Inside the namespace too, so that scripts/clean finds it after a kill -9.
    "${in[@]}" ovsdb-server "$d/conf.db" --remote="punix:$d/db.sock" --unixctl="$d/ovsdb-server.ctl" \
        --pidfile="$d/ovsdb-server.pid" --log-file="$d/ovsdb-server.log" --detach --no-chdir
    local vsctl=(ovs-vsctl --db="unix:$d/db.sock" --timeout=30)
    "${vsctl[@]}" --no-wait init
    if [ "$1" = tester ]; then
        # No datapath flow cache in the tester: OVS revalidates cached
        # flows after a flow table change asynchronously, not before the
        # barrier reply, so a packet arriving soon after the tester's
        # per-test "delete all, add in_port=2 -> CONTROLLER" could meet the
        # cached drop of the moment in between and never reach the
        # controller ("Receiving timeout: increment in rx_packets in
        # tester", more often the faster the target forwards).
        "${vsctl[@]}" --no-wait set Open_vSwitch . other_config:flow-limit=0
    fi
    "${in[@]}" env OVS_RUNDIR="$d" ovs-vswitchd "unix:$d/db.sock" --unixctl="$d/ovs-vswitchd.ctl" \
        --pidfile="$d/ovs-vswitchd.pid" --log-file="$d/ovs-vswitchd.log" --detach --no-chdir
    "${vsctl[@]}" add-br "br-$1" -- set bridge "br-$1" datapath_type=netdev protocols=OpenFlow13 \
        fail_mode=secure other-config:datapath-id="$dpid"
    for i in 1 2 3; do
        "${vsctl[@]}" add-port "br-$1" "$side$i" -- set interface "$side$i" ofport_request="$i"
    done
    "${vsctl[@]}" set-controller "br-$1" "tcp:$controller:6653"
}
start_ovs tester 0000000000000002 xs "$ns"
if [ "$target" = xbr ]; then
    mkdir -p "$work/xbr"
    inns "$xbr" run --bridge br0 --rundir "$work/xbr" --port xt1=1 --port xt2=2 --port xt3=3 \
        --datapath-id 0000000000000001 --controller "tcp:$controller:6653" >"$work/xbr.log" 2>&1 &
    xbr_pid=$!
else
    start_ovs target 0000000000000001 xt "$target_ns"
fi

status=0
total_ok=0
total=0
for c in "${categories[@]}"; do
    dir=$work/cases/$c
    mkdir -p "$dir"
    n=0
    while IFS= read -r f; do
        rel=${f#"$cases/"}
        if [ -z "$only" ] || [[ $rel =~ $only ]]; then
            mkdir -p "$dir/$(dirname "$rel")"
            cp "$f" "$dir/$rel"
            n=$((n + 1))
        fi
    done < <(case $c in
        set_field) find "$cases/action/25_SET_FIELD" -name '*.json' ;;
        action) find "$cases/action" -maxdepth 1 -name '*.json' ;;
        *) find "$cases/$c" -name '*.json' ;;
    esac | sort)
    if [ "$n" -eq 0 ]; then
        log "$c: no test file matches '$only'"
        continue
    fi
    out=$work/$c.log
    # The tester ends its own process with SIGTERM after the report.
    inns timeout "$timeout_s" "$venv/bin/python" "$here/driver.py" os_ken.tests.switch.tester --test-switch-dir "$dir" \
        --ofp-tcp-listen-port 6653 >"$out" 2>&1 || true
    if [ -n "${XBR_OSKEN_LOGS:-}" ]; then
        mkdir -p "$XBR_OSKEN_LOGS"
        cp "$out" "$XBR_OSKEN_LOGS/"
    fi
    score=$(grep -E '^OK\([0-9]+\) / ERROR\([0-9]+\)' "$out" | tail -1 || true)
    if [ -z "$score" ]; then
        log "$c: the tester printed no report (timeout ${timeout_s}s?); its log ends with:"
        tail -20 "$out" >&2
        status=1
        continue
    fi
    ok=$(sed -E 's/^OK\(([0-9]+)\).*/\1/' <<<"$score")
    err=$(sed -E 's/.*ERROR\(([0-9]+)\).*/\1/' <<<"$score")
    echo "$c $ok/$((ok + err))"
    total_ok=$((total_ok + ok))
    total=$((total + ok + err))
    # The failed tests and why, from the report.
    sed -n '/--- Test report ---/,$p' "$out" | grep -vE '^OK\(|^$|^Terminated|--- Test report' |
        sed "s/^/  $c: /" >&2 || true
    if [ -n "${min[$c]:-}" ] && [ "$ok" -lt "${min[$c]}" ]; then
        log "$c: $ok tests passed, fewer than the required ${min[$c]}"
        status=1
    fi
done
echo "total $total_ok/$total"
if [ "$target" = xbr ] && ! kill -0 "$xbr_pid" 2>/dev/null; then
    log "xbr exited during the run; its log:"
    tail -30 "$work/xbr.log" >&2
    status=1
fi
exit "$status"
