//! `ovs-afxdp`: Open vSwitch 3.1 in a topology's host namespace, run as
//! `/work/shared/anchor` runs it (see the module above).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{
    load_flows, make_dir, start_err, Ports, SwitchConfig, System, SystemError, START_TIMEOUT,
};
use crate::ovs::agent_bridge_netdev;
use crate::ovs::OvsError;
use crate::private_ovs::{stop_pid, PrivateOvs};
use crate::topo::{self, Topology, VETH_A, VETH_B, VETH_C};

/// A private OVS in the host namespace; daemons stopped by pid on drop.
pub struct OvsGuard {
    ovs: PrivateOvs,
    /// The core ovs-vswitchd runs on (again after a restart).
    cpu: usize,
}

impl OvsGuard {
    fn ns(&self, args: &[&str], timeout: Duration) -> Result<String, OvsError> {
        self.ovs.run(args, timeout)
    }

    fn vsctl(&self, args: &[&str]) -> Result<String, OvsError> {
        self.ovs.vsctl(args)
    }

    pub(super) fn start(topo: &Topology, cfg: &SwitchConfig) -> Result<OvsGuard, SystemError> {
        let g = OvsGuard {
            ovs: PrivateOvs::new(&make_dir("ovs")?, &topo.host)?,
            cpu: cfg.cpu,
        };
        g.ovs.start_db()?;
        let mask = format!("other_config:pmd-cpu-mask=0x{:x}", 1u64 << cfg.cpu);
        g.vsctl(&["--no-wait", "set", "Open_vSwitch", ".", &mask])?;
        g.start_vswitchd()?;
        g.vsctl(&xbr_lab::agent_vsctl::as_strs(&agent_bridge_netdev()))?;
        if let Some((cidr, uplink)) = cfg.ports.node_address().zip(cfg.ports.uplink()) {
            g.uplink_bridge(topo, cidr.0, uplink)?;
            g.vsctl(&[
                "add-port",
                "br0",
                "vxlan0",
                "--",
                "set",
                "interface",
                "vxlan0",
                "type=vxlan",
                "options:remote_ip=flow",
                "options:key=flow",
                "options:dst_port=4789",
                "ofport_request=1",
            ])?;
        }
        match &cfg.ports {
            Ports::Pods { a, b } => {
                g.afxdp_port("br0", VETH_A, Some(*a))?;
                g.afxdp_port("br0", VETH_B, Some(*b))?;
            }
            Ports::VxlanIn { .. } => g.afxdp_port("br0", VETH_B, Some(2))?,
            Ports::VxlanOut {
                a,
                remote,
                remote_mac,
                ..
            } => {
                g.afxdp_port("br0", VETH_A, Some(*a))?;
                // The remote VTEP (pod B's sink) answers no ARP: its
                // MAC as the neighbour the tunnel's next hop resolves to.
                g.appctl(&[
                    "tnl/neigh/set",
                    "br-phy",
                    &remote.to_string(),
                    &topo::mac(*remote_mac),
                ])?;
            }
        }
        let mut ports = vec![VETH_A, VETH_B];
        if topo.pod_c.is_some() {
            g.afxdp_port("br0", VETH_C, Some(3))?;
            ports.push(VETH_C);
        }
        // A port OVS could not open gets ofport -1 and an error column.
        for port in ports {
            let of = g.vsctl(&["get", "interface", port, "ofport"])?;
            if of.trim() == "-1" || of.trim() == "[]" {
                let err = g
                    .vsctl(&["get", "interface", port, "error"])
                    .unwrap_or_default();
                return Err(start_err(
                    System::OvsAfxdp,
                    format!("port {port} not opened: {}", err.trim()),
                ));
            }
        }
        if let Some(limit) = cfg.ct_limit {
            g.appctl(&["dpctl/ct-set-maxconns", &limit.to_string()])?;
        }
        load_flows(g.ovs.dir(), &g.rundir(), cfg)?;
        Ok(g)
    }

    /// Starts ovs-vswitchd (pinned to the switch core, detached: returns
    /// once it has read its configuration).
    fn start_vswitchd(&self) -> Result<(), OvsError> {
        let cpu = self.cpu.to_string();
        self.ovs
            .start_vswitchd(&["nice", "-n", "-20", "taskset", "-c", &cpu])
    }

    /// Restarts ovs-vswitchd as `ovs-ctl restart` does (ovs-lib's
    /// `restart`), ovsdb-server aside (it keeps running, as xbr has none
    /// to restart): `ovs-save save-flows br0` into a script, stop
    /// ovs-vswitchd (`ovs-appctl exit`), set
    /// `other_config:flow-restore-wait=true`, start ovs-vswitchd, run the
    /// script (`replace-flows`), remove `flow-restore-wait`. `spawned` is
    /// set when the new ovs-vswitchd is started; `flows` bounds the
    /// restore's time (10 ms a flow on top of the usual bound).
    pub(super) fn restart_ovs_ctl(
        &mut self,
        spawned: &std::sync::OnceLock<Instant>,
        flows: usize,
    ) -> Result<super::restart::Restarted, SystemError> {
        let t = Instant::now();
        let script = self.ns(
            &[
                "/usr/share/openvswitch/scripts/ovs-save",
                "save-flows",
                "br0",
            ],
            START_TIMEOUT + Duration::from_millis(flows as u64),
        )?;
        let path = self.ovs.dir().join("restore-flows.sh");
        std::fs::write(&path, script).map_err(|source| OvsError::Io {
            context: format!("writing {}", path.display()),
            source,
        })?;
        let save = t.elapsed();
        let old = self
            .vswitchd_pid()
            .ok_or_else(|| start_err(System::OvsAfxdp, "no ovs-vswitchd pid to restart"))?;
        let t = Instant::now();
        self.appctl(&["exit"])?;
        let old = i32::try_from(old)
            .map_err(|_| start_err(System::OvsAfxdp, format!("pid {old} out of range")))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while nix::sys::signal::kill(nix::unistd::Pid::from_raw(old), None).is_ok() {
            if Instant::now() > deadline {
                stop_pid(old);
                return Err(start_err(
                    System::OvsAfxdp,
                    "ovs-vswitchd did not exit within 10 s of `exit`",
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let stop = t.elapsed();
        self.vsctl(&[
            "--no-wait",
            "set",
            "open_vswitch",
            ".",
            "other_config:flow-restore-wait=true",
        ])?;
        let started = Instant::now();
        // Set once: a second restart of the same guard keeps the first.
        let _ = spawned.set(started);
        self.start_vswitchd()?;
        let path_s = path.display().to_string();
        // ovs-ofctl replace-flows into a vswitchd under a 100 kpps stream
        // on 2 cores took well over 1 ms a flow at 100,000 flows.
        self.ns(
            &["sh", &path_s],
            START_TIMEOUT + Duration::from_millis(10 * flows as u64),
        )?;
        self.vsctl(&[
            "--no-wait",
            "--if-exists",
            "remove",
            "open_vswitch",
            ".",
            "other_config",
            "flow-restore-wait=true",
        ])?;
        Ok(super::restart::Restarted {
            save: Some(save),
            stop,
            spawned: started,
            start_to_ready: started.elapsed(),
        })
    }

    pub(super) fn vswitchd_pid(&self) -> Option<u32> {
        self.ovs.vswitchd_pid()
    }

    /// The directory holding `br0.mgmt`.
    pub(super) fn rundir(&self) -> PathBuf {
        self.ovs.dir().join("run")
    }

    fn appctl(&self, args: &[&str]) -> Result<String, OvsError> {
        self.ovs.appctl(args)
    }

    pub(super) fn conntrack_entries(&self) -> Result<u64, SystemError> {
        let out = self.appctl(&["dpctl/ct-get-nconns"])?;
        out.trim().parse().map_err(|_| {
            start_err(
                System::OvsAfxdp,
                format!("dpctl/ct-get-nconns answered `{}`", out.trim()),
            )
        })
    }

    fn afxdp_port(&self, bridge: &str, port: &str, ofport: Option<u32>) -> Result<(), OvsError> {
        let req = ofport.map(|n| format!("ofport_request={n}"));
        let mut args = vec![
            "add-port",
            bridge,
            port,
            "--",
            "set",
            "interface",
            port,
            "type=afxdp",
            "options:xdp-mode=native",
            "options:n_rxq=1",
        ];
        args.extend(req.as_deref());
        self.vsctl(&args)?;
        Ok(())
    }

    /// The userspace datapath terminates and originates VXLAN only for an
    /// address that a bridge's internal port holds: the uplink veth goes
    /// into `br-phy` (as bench::ovs_node does for the lab), which takes
    /// the MAC the `vxlan` scenario's generator sends to and the node's
    /// address.
    fn uplink_bridge(&self, topo: &Topology, cidr: &str, uplink: &str) -> Result<(), SystemError> {
        let hwaddr = format!("other-config:hwaddr=\"{}\"", topo::mac(topo::MAC_VA));
        self.vsctl(&[
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
            &hwaddr,
        ])?;
        self.afxdp_port("br-phy", uplink, None)?;
        let deadline = Instant::now() + START_TIMEOUT;
        while topo
            .exec(&topo.host, &["ip", "link", "show", "br-phy"])
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(start_err(System::OvsAfxdp, "br-phy did not appear"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        topo.exec(&topo.host, &["ip", "addr", "add", cidr, "dev", "br-phy"])?;
        topo.exec(&topo.host, &["ip", "link", "set", "br-phy", "up"])?;
        Ok(())
    }
}

impl Drop for OvsGuard {
    fn drop(&mut self) {
        // Removing the bridge first releases the AF_XDP sockets and XDP
        // programs cleanly; the pids are the fallback.
        let _ = self.vsctl(&["--if-exists", "del-br", "br0"]);
        let _ = self.vsctl(&["--if-exists", "del-br", "br-phy"]);
        self.ovs.stop_daemons();
        let _ = std::fs::remove_dir_all(self.ovs.dir());
    }
}
