//! A test double for the datapath: keeps a `Pipeline` replica that applies
//! every published change list, and a fixed set of ports.

#![allow(dead_code)]

pub mod sdn;

use flowtable::tables::Change;
use flowtable::{Action, DpAction, Field, FlowKey, Meter, Pipeline, Xlate};
use ofproto::{Bridge, Datapath, PacketOutError, PortCounters, PortInfo, PortModError, Server};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A PACKET_OUT as the double saw it: in_port, data, datapath actions.
pub type PacketOutRecord = (u32, Vec<u8>, Vec<DpAction>);

pub struct MemDatapath {
    pub replica: Mutex<Pipeline>,
    /// Every PACKET_OUT: its in_port, data, and what the replica made of
    /// its actions (the key holds only in_port: no packet parser here).
    pub packet_outs: Mutex<Vec<PacketOutRecord>>,
    pub fail_open: Mutex<bool>,
    pub seq: Mutex<u64>,
    /// The highest change list a caller waited for (`sync`).
    pub synced: Mutex<u64>,
    pub ports: Mutex<Vec<PortInfo>>,
    /// The meters as published, which a datapath would run and count in.
    pub meters: Mutex<HashMap<u32, Arc<Meter>>>,
}

impl MemDatapath {
    pub fn new() -> Arc<Self> {
        let ports = vec![port(1, "vxlan0"), port(2, "tun0"), port(3, "veth0001")];
        Arc::new(MemDatapath {
            replica: Mutex::new(Pipeline::new()),
            packet_outs: Mutex::new(Vec::new()),
            fail_open: Mutex::new(false),
            seq: Mutex::new(0),
            synced: Mutex::new(0),
            ports: Mutex::new(ports),
            meters: Mutex::default(),
        })
    }
}

fn port(no: u32, name: &str) -> PortInfo {
    PortInfo {
        port_no: no,
        hw_addr: [0x02, 0, 0, 0, 0, no as u8],
        name: name.into(),
        config: 0,
        state: 4,
        curr_speed: 10_000_000,
        max_speed: 0,
    }
}

impl Datapath for MemDatapath {
    fn datapath_id(&self) -> u64 {
        0x0000_2a2a_2a2a_2a2a
    }
    fn ports(&self) -> Vec<PortInfo> {
        self.ports.lock().clone()
    }
    fn port_stats(&self, port_no: u32) -> Vec<PortCounters> {
        self.ports
            .lock()
            .iter()
            .filter(|p| port_no == u32::MAX || p.port_no == port_no)
            .map(|p| PortCounters {
                port_no: p.port_no,
                rx_packets: 10 * u64::from(p.port_no),
                tx_packets: 20 * u64::from(p.port_no),
                rx_bytes: 1000,
                tx_bytes: 2000,
                duration: Duration::from_secs(5),
                ..Default::default()
            })
            .collect()
    }
    fn port_mod(
        &self,
        port_no: u32,
        hw_addr: [u8; 6],
        config: u32,
        mask: u32,
    ) -> Result<(), PortModError> {
        let mut ports = self.ports.lock();
        let p = ports
            .iter_mut()
            .find(|p| p.port_no == port_no)
            .ok_or(PortModError::BadPort)?;
        if p.hw_addr != hw_addr {
            return Err(PortModError::BadHwAddr);
        }
        p.config = (p.config & !mask) | (config & mask);
        Ok(())
    }
    fn publish(&self, changes: Vec<Change>) -> u64 {
        self.replica.lock().apply(&changes);
        let mut meters = self.meters.lock();
        for c in &changes {
            match c {
                Change::SetMeter(m) => {
                    meters.insert(m.id, m.clone());
                }
                Change::RemoveMeter(id) => {
                    meters.remove(id);
                }
                _ => {}
            }
        }
        let mut s = self.seq.lock();
        *s += 1;
        *s
    }
    fn sync(&self, seq: u64) {
        let mut s = self.synced.lock();
        *s = (*s).max(seq);
    }
    fn set_fail_open(&self, on: bool) {
        *self.fail_open.lock() = on;
    }
    fn packet_out(
        &self,
        in_port: u32,
        metadata: Vec<(Field, u64)>,
        actions: Vec<Action>,
        data: Vec<u8>,
    ) -> Result<(), PacketOutError> {
        let mut key = FlowKey::zero();
        key.set(Field::InPort, u64::from(in_port));
        for (field, value) in metadata {
            key.set(field, value);
        }
        let mut x = Xlate::new();
        self.replica
            .lock()
            .xlate_actions(&key, data.len() as u32, &actions, &mut x);
        self.packet_outs
            .lock()
            .push((in_port, data, x.actions().to_vec()));
        Ok(())
    }
}

pub struct Harness {
    pub dir: PathBuf,
    pub sock: PathBuf,
    pub dp: Arc<MemDatapath>,
    pub bridge: Arc<Bridge>,
    pub server: Option<Server>,
}

impl Harness {
    pub fn start(name: &str) -> Harness {
        Self::start_with(name, None, ofproto::limits::ControlLimits::default())
    }

    /// A harness whose server also listens on a passive TCP target
    /// (`ptcp:` on a free loopback port, [`Server::local_tcp_addr`]),
    /// with `limits` set before it starts.
    pub fn start_passive(name: &str, limits: ofproto::limits::ControlLimits) -> Harness {
        Self::start_with(name, Some("127.0.0.1:0".parse().unwrap()), limits)
    }

    fn start_with(
        name: &str,
        tcp: Option<std::net::SocketAddr>,
        limits: ofproto::limits::ControlLimits,
    ) -> Harness {
        let dir = std::env::temp_dir().join(format!("xbrt-ofproto-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("br0.mgmt");
        let dp = MemDatapath::new();
        let bridge = Bridge::new(dp.clone());
        bridge.set_control_limits(limits);
        let server = Server::start(bridge.clone(), &sock, tcp).unwrap();
        Harness {
            dir,
            sock,
            dp,
            bridge,
            server: Some(server),
        }
    }

    pub fn target(&self) -> String {
        format!("unix:{}", self.sock.display())
    }

    /// Runs `ovs-ofctl -O OpenFlow13 <args>` against the server; returns
    /// (success, stdout, stderr).
    pub fn ofctl(&self, args: &[&str]) -> (bool, String, String) {
        self.ofctl_with("OpenFlow13", args)
    }

    /// Runs `ovs-ofctl -O <protocols> <args>`.
    pub fn ofctl_with(&self, protocols: &str, args: &[&str]) -> (bool, String, String) {
        let out = std::process::Command::new("ovs-ofctl")
            .arg("-O")
            .arg(protocols)
            .args(args)
            .output()
            .expect("ovs-ofctl must be installed");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Like `ofctl` but panics on failure; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.ofctl(args);
        assert!(ok, "ovs-ofctl {args:?} failed: {err}\n{out}");
        out
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Flow lines of a dump without the per-run fields (duration, counters).
pub fn normalise_dump(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(' '))
        .map(|l| {
            l.trim()
                .split(", ")
                .filter(|p| {
                    !p.starts_with("duration=")
                        && !p.starts_with("n_packets=")
                        && !p.starts_with("n_bytes=")
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect()
}

/// One whole OpenFlow message from `s` (`None` at EOF or on a timeout).
pub fn read_msg(s: &mut impl std::io::Read) -> Option<Vec<u8>> {
    let mut h = [0u8; 8];
    s.read_exact(&mut h).ok()?;
    let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let mut m = h.to_vec();
    m.resize(len.max(8), 0);
    s.read_exact(&mut m[8..]).ok()?;
    Some(m)
}
