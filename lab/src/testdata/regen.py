#!/usr/bin/env python3
"""Regenerates the reference flow sets the lab's flow generator is tested against.

For each case below this runs the agent-faithful generator `gen_flows.py`
(shared/sdn; path in $GEN_FLOWS, default /work/shared/sdn/gen_flows.py) and
writes, next to this script:

  CASE.flows  its output (`--format flows`), unchanged;
  CASE.json   the topology it modelled (pods, VNIDs, remote nodes with their
              HostSubnet cookies, addresses), read from its own objects, so the
              Rust test can feed the same topology to `lab::flows`.

Every case disables what the lab does not model (egress policies, egress IPs,
multicast namespaces, Services). Run it after gen_flows.py changes:

  python3 lab/src/testdata/regen.py
"""

import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.environ.get("GEN_FLOWS", "/work/shared/sdn/gen_flows.py")

COMMON = ["--egress-policies", "0", "--egress-ips", "0", "--multicast-namespaces", "0",
          "--services", "0", "--format", "flows"]

CASES = {
    "subnet-legacy": ["--mode", "subnet", "--legacy-nonconntrack", "--pods", "5",
                      "--namespaces", "2", "--remote-nodes", "2", "--seed", "3"],
    "subnet-legacy-single-node": ["--mode", "subnet", "--legacy-nonconntrack", "--pods", "4",
                                  "--namespaces", "1", "--remote-nodes", "0"],
    "multitenant-legacy": ["--mode", "multitenant", "--legacy-nonconntrack", "--pods", "8",
                           "--namespaces", "3", "--remote-nodes", "3", "--seed", "7",
                           "--local-subnet", "10.128.4.0/23", "--node-ip", "10.0.0.12"],
    "multitenant-legacy-two-global": ["--mode", "multitenant", "--legacy-nonconntrack",
                                      "--pods", "9", "--namespaces", "4",
                                      "--global-namespaces", "2", "--remote-nodes", "1"],
    "multitenant-conntrack": ["--mode", "multitenant", "--pods", "6", "--namespaces", "3",
                              "--remote-nodes", "2", "--cluster-network", "10.128.0.0/14",
                              "--cluster-network", "10.132.0.0/15"],
    "subnet-conntrack": ["--mode", "subnet", "--pods", "3", "--namespaces", "2",
                         "--remote-nodes", "1"],
    "networkpolicy-conntrack": ["--mode", "networkpolicy", "--pods", "6", "--namespaces", "1",
                                "--global-namespaces", "0", "--remote-nodes", "2"],
}


def load_gen():
    spec = importlib.util.spec_from_file_location("gen_flows", GEN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def topology(g):
    a = g.a
    return {
        "mode": a.mode,
        "legacy": bool(a.legacy_nonconntrack),
        "cluster_networks": list(g.cluster_cidrs),
        "service_network": g.service_cidr,
        "local_subnet": str(g.local_subnet),
        "node_ip": a.node_ip,
        "local_mac": a.local_mac,
        "tun_mac": a.tun_mac,
        "vxlan_port": a.vxlan_port,
        "namespace_vnids": [ns.vnid for ns in g.namespaces if ns.pods],
        "pods": [{"ip": p.ip, "ofport": p.ofport, "vnid": p.ns.vnid} for p in g.pods],
        "remote_nodes": [{"subnet": r["subnet"], "ip": r["ip"],
                          "cookie": GEN_MOD.host_subnet_cookie(r["uid"])} for r in g.remote],
    }


GEN_MOD = None


def main():
    global GEN_MOD
    GEN_MOD = load_gen()
    captured = {}
    orig_run = GEN_MOD.Gen.run

    def run(self):
        orig_run(self)
        captured["topo"] = topology(self)

    GEN_MOD.Gen.run = run
    for name, args in CASES.items():
        out_path = os.path.join(HERE, name + ".flows")
        sys.argv = ["gen_flows.py"] + args + COMMON
        with open(out_path, "w") as out:
            saved, sys.stdout = sys.stdout, out
            try:
                GEN_MOD.main()
            finally:
                sys.stdout = saved
        topo = captured.pop("topo")
        topo["gen_flows_args"] = args + COMMON
        with open(os.path.join(HERE, name + ".json"), "w") as fh:
            json.dump(topo, fh, indent=1, sort_keys=True)
            fh.write("\n")
        print("wrote %s (.flows, .json)" % name)


if __name__ == "__main__":
    main()
