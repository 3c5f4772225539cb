//! The XDP programs with a real flow cache, run by `BPF_PROG_TEST_RUN`
//! (no device, no traffic), as the XDP cache test crates drive them.
//! Needs root (loading BPF), as CI runs tests.

#![allow(dead_code)]

use dataplane::conntrack::{Conntrack, CtRequest};
use dataplane::fastpath::cache::entry::{frame_key, FcKey};
use dataplane::fastpath::cache::{CacheMaps, CtConn, FcAction, Origin, XdpCache};
use dataplane::fastpath::loader::XdpTestRun;
use flowtable::cache::{Attribution, FlowCache};
use flowtable::key::FlowKey;
use flowtable::pipeline::{DropReason, Pipeline, Xlate};
use std::sync::Arc;
use std::time::Instant;
use xbr_packet::parse;

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_REDIRECT: u32 = 4;
/// What the pod ports' program returns for a frame it hands to xbr in a
/// test run: the redirect to the queue's AF_XDP socket falls back, with
/// no socket bound, to the fail-closed drop (counted in `closed_drops`),
/// never to XDP_PASS into the host (`crate::fastpath::pin`'s fail-closed ports).
/// The VXLAN uplink's program still passes what is not xbr's.
pub const TO_XBR: u32 = XDP_DROP;
/// `BPF_PROG_TEST_RUN` receives on the loopback device.
pub const LO: u32 = 1;

/// Counters of an (empty) pipeline's translation, to hand to installs.
pub fn attribution() -> Attribution {
    let pipe = Pipeline::new();
    let mut cache = FlowCache::default();
    let mut x = Xlate::new();
    let key = FlowKey::zero();
    cache.xlate(&pipe, &key, 64, &mut x);
    cache
        .attribution(&pipe, &key)
        .expect("a table miss is cacheable")
}

/// `action` to a device that takes frames in several buffers (jumbo
/// frames may hit).
pub fn taking_frags(mut action: FcAction) -> FcAction {
    if let FcAction::Redirect { frags, .. } = &mut action {
        *frags = true;
    }
    action
}

/// Where a test's entry came from: port 0, no passes (a revalidation
/// would remove it; these tests do not revalidate).
pub fn origin() -> Origin {
    Origin {
        in_port: 0,
        passes: Box::new([]),
        forks: Box::new([]),
    }
}

/// The programs, a cache whose entries they read (lo is a redirect
/// target), and the conntrack its conntrack entries link into.
pub struct XdpRig {
    pub ct: Conntrack,
    pub cache: XdpCache,
    pub prog: XdpTestRun,
}

impl XdpRig {
    pub fn new() -> XdpRig {
        XdpRig::with_capacity(64)
    }

    /// A rig whose cache holds `entries`.
    pub fn with_capacity(entries: u32) -> XdpRig {
        let maps = Arc::new(
            CacheMaps::new(entries, 4, 1024)
                .expect("creating BPF maps (needs root, as CI runs tests)"),
        );
        maps.add_dev(LO).expect("lo as a redirect target");
        let prog = XdpTestRun::load(&maps).expect("loading the XDP programs");
        let mut cache = XdpCache::new(maps);
        cache.begin_round();
        XdpRig {
            ct: Conntrack::default(),
            cache,
            prog,
        }
    }

    /// Installs `action` at `key`, through conntrack connections `conns`.
    pub fn install_key(&mut self, key: FcKey, action: FcAction, conns: &[CtConn]) {
        let out = match action {
            FcAction::Drop => Err(DropReason::ExplicitDrop),
            FcAction::Redirect { .. } => Ok(1),
        };
        let now = self.ct.now_ms();
        let before = self.cache.len();
        self.cache.install(
            key,
            action,
            origin(),
            out,
            attribution(),
            conns,
            &self.ct,
            now,
        );
        assert_eq!(self.cache.len(), before + 1, "not installed");
    }

    /// Installs `action` for frames like `f` received on lo.
    pub fn install(&mut self, f: &[u8], action: FcAction, conns: &[CtConn]) {
        let key = frame_key(f, LO).expect("a frame the program looks up");
        self.install_key(key, action, conns);
    }

    /// Runs the pods' program on `f`: the action and the frame it left.
    pub fn run(&mut self, f: &[u8]) -> (u32, Vec<u8>) {
        self.prog.run(f).expect("BPF_PROG_TEST_RUN")
    }

    /// Runs a VXLAN uplink's program on `f`.
    pub fn run_vxlan(&mut self, f: &[u8]) -> (u32, Vec<u8>) {
        self.prog.run_vxlan(f).expect("BPF_PROG_TEST_RUN")
    }

    /// Hits the programs counted so far.
    pub fn hits(&mut self) -> u64 {
        let now = self.ct.now_ms();
        self.cache.sweep(Instant::now(), true, false, &self.ct, now);
        self.cache.stats().hit_packets
    }
}

/// Ethernet + IPv4 + UDP (checksum 0, which IPv4 allows), for the
/// conntrack tests.
pub fn udp(src: u32, sport: u16, dst: u32, dport: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip.extend_from_slice(&src.to_be_bytes());
    ip.extend_from_slice(&dst.to_be_bytes());
    let sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 12, 0, 0, b'p', b'i', b'n', b'g']);
    f
}

/// Runs `frame` (received on port 1) through `ct` with `req`: its ct_state.
pub fn track(ct: &Conntrack, mut frame: Vec<u8>, req: &CtRequest) -> u32 {
    let mut key = FlowKey::zero();
    let layers = parse::extract(&frame, 1, &mut key);
    ct.execute(&mut frame, layers, &key, req, ct.now_ms()).state
}

/// `ct(commit)`.
pub fn commit() -> CtRequest {
    CtRequest {
        commit: true,
        ..CtRequest::default()
    }
}
