//! The engine with a VXLAN port over in-memory ports: encapsulation on
//! output (template, VNI, MTU, unresolved neighbours), decapsulation on
//! input (tunnel metadata in the flow key, malformed packets counted), and
//! frame accounting (every frame comes back to the store).

use dataplane::control::{ChangeReceiver, DpShared, PortMeta};
use dataplane::engine::{Desc, Engine, Frames, PortIo};
use dataplane::memport::{ArenaFrames, MemPort};
use dataplane::vxlan::encap::{decap, src_port, Template};
use dataplane::vxlan::neigh::{Entry, NeighReader, NeighShared, Snapshot};
use dataplane::vxlan::{TunnelDrops, VxlanParams, VxlanPort, VxlanTunnel};
use flowtable::{Action, Field, FlowMod, FlowTables, Instructions, Match};
use ofproto::Datapath;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use xbr_packet::vxlan::{Ipv4Packet, UdpPacket, OUTER_LEN};

const N_FRAMES: u32 = 256;
const FRAME: u32 = 2048;
/// Where the kernel puts received packets in a frame.
const HEADROOM: u32 = 256;
const LOCAL_IP: u32 = 0x0a00_000b; // 10.0.0.11
const REMOTE_IP: u32 = 0x0a00_000c; // 10.0.0.12
const UNRESOLVED_IP: u32 = 0x0a00_000d;
const LOCAL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
const REMOTE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x12];
const VNI: u64 = 0x0012_3456;

/// Port 1 is the VXLAN port, the others plain.
enum TestPort {
    Plain(MemPort),
    Vxlan(VxlanPort<MemPort>),
}

impl TestPort {
    fn mem(&mut self) -> &mut MemPort {
        match self {
            TestPort::Plain(p) => p,
            TestPort::Vxlan(v) => v.uplink_mut(),
        }
    }
}

impl PortIo<ArenaFrames> for TestPort {
    fn recv(&mut self, f: &mut ArenaFrames, out: &mut [Desc]) -> usize {
        match self {
            TestPort::Plain(p) => p.recv(f, out),
            TestPort::Vxlan(v) => v.recv(f, out),
        }
    }
    fn send(&mut self, f: &mut ArenaFrames, d: &[Desc]) -> usize {
        match self {
            TestPort::Plain(p) => p.send(f, d),
            TestPort::Vxlan(v) => v.send(f, d),
        }
    }
    fn maintain(&mut self, _f: &mut ArenaFrames) {}
    fn poll_fds<'a>(&'a self, _out: &mut Vec<BorrowedFd<'a>>) {}
    fn tunnel(&self) -> Option<&VxlanTunnel> {
        match self {
            TestPort::Plain(_) => None,
            TestPort::Vxlan(v) => PortIo::<ArenaFrames>::tunnel(v),
        }
    }
    fn tunnel_mut(&mut self) -> Option<&mut VxlanTunnel> {
        match self {
            TestPort::Plain(_) => None,
            TestPort::Vxlan(v) => PortIo::<ArenaFrames>::tunnel_mut(v),
        }
    }
}

/// An Ethernet/IPv4/UDP frame between two pods, correct IP checksum.
fn inner_frame(payload_len: usize) -> Vec<u8> {
    let mut f = vec![
        0x0a, 0x58, 10, 128, 2, 3, 0x0a, 0x58, 10, 128, 0, 2, 0x08, 0x00,
    ];
    let total = (20 + 8 + payload_len) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 128, 0, 2, 10, 128, 2, 3,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = !xbr_packet::csum::fold(xbr_packet::csum::ones_sum(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35]);
    f.extend_from_slice(&(8 + payload_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..payload_len).map(|i| i as u8));
    f
}

fn template_to_remote() -> Template {
    Template::new(LOCAL_MAC, REMOTE_MAC, LOCAL_IP, REMOTE_IP, 4789)
}

/// `inner` as the remote node sends it to us.
fn from_remote(inner: &[u8], vni: u32) -> Vec<u8> {
    let t = Template::new(REMOTE_MAC, LOCAL_MAC, REMOTE_IP, LOCAL_IP, 4789);
    let mut f = vec![0u8; OUTER_LEN];
    t.write(&mut f, inner.len(), 9, 50000, vni);
    f.extend_from_slice(inner);
    f
}

struct Rig {
    engine: Engine<ArenaFrames, TestPort>,
    shared: Arc<DpShared>,
    tables: FlowTables,
    /// The resolver's side: what the VXLAN port's next hops are.
    neigh: Arc<NeighShared>,
    metas: Vec<Arc<PortMeta>>,
}

impl Rig {
    /// VXLAN port 1 (uplink MTU `mtu`), plain ports 2 and 3.
    fn new(mtu: u32) -> Rig {
        let metas: Vec<Arc<PortMeta>> = (1..=3u32)
            .map(|p| Arc::new(PortMeta::new(p, format!("p{p}"), [2, 0, 0, 0, 1, p as u8])))
            .collect();
        let (shared, changes): (Arc<DpShared>, ChangeReceiver) =
            DpShared::new(1, metas.clone()).expect("eventfd");
        let neigh = Arc::new(NeighShared::default());
        neigh.publish(Snapshot::from_entries([(
            REMOTE_IP,
            Entry::Ready(template_to_remote()),
        )]));
        let (tx, _rx) = crossbeam::channel::bounded(4);
        let reader = NeighReader::new(neigh.clone(), tx);
        let params = VxlanParams {
            local_ip: LOCAL_IP,
            dst_port: 4789,
            mtu,
        };
        let mut ports = vec![(
            metas[0].clone(),
            TestPort::Vxlan(VxlanPort::new(MemPort::default(), params, reader)),
        )];
        for m in &metas[1..] {
            ports.push((m.clone(), TestPort::Plain(MemPort::default())));
        }
        let engine = Engine::new(
            ArenaFrames::new(N_FRAMES, FRAME),
            ports,
            shared.clone(),
            changes,
        );
        Rig {
            engine,
            shared,
            tables: FlowTables::new(),
            neigh,
            metas,
        }
    }

    fn flow(&mut self, priority: u16, m: Match, actions: Vec<Action>) {
        let fm = FlowMod::add(0, priority, m, Instructions::apply(actions));
        let changes = self.tables.flow_mod(&fm).expect("valid flow");
        self.shared.publish(changes);
        self.engine.apply_changes();
    }

    fn inject(&mut self, ofport: u32, frame: &[u8]) {
        let desc = self
            .engine
            .frames_mut()
            .load_at(frame, HEADROOM)
            .expect("a free frame");
        let port = self
            .engine
            .port_io_mut((ofport - 1) as usize)
            .expect("port");
        port.mem().rx.push_back(desc);
    }

    fn sent(&mut self, ofport: u32) -> Vec<Vec<u8>> {
        let port = self
            .engine
            .port_io_mut((ofport - 1) as usize)
            .expect("port");
        std::mem::take(&mut port.mem().sent)
    }

    fn free_frames(&mut self) -> usize {
        self.engine.frames_mut().free_frames()
    }

    /// The resolver finds the next hop of `dst` (and forgets the others).
    fn resolve(&mut self, dst: u32) {
        let template = Template::new(LOCAL_MAC, REMOTE_MAC, LOCAL_IP, dst, 4789);
        self.neigh
            .publish(Snapshot::from_entries([(dst, Entry::Ready(template))]));
    }

    /// Pod port 2 sends to `dst` with VNI [`VNI`].
    fn encap_flow(&mut self, dst: u32) {
        let mut m = Match::catch_all();
        m.set_exact(Field::InPort, 2);
        self.flow(100, m, encap_actions(dst));
    }
}

/// Out of the VXLAN port (1) to node `dst` with VNI [`VNI`].
fn encap_actions(dst: u32) -> Vec<Action> {
    vec![
        Action::SetField {
            field: Field::TunDst,
            value: u64::from(dst),
        },
        Action::SetField {
            field: Field::TunId,
            value: VNI,
        },
        Action::Output {
            port: 1,
            max_len: 0,
        },
    ]
}

#[test]
fn output_to_the_vxlan_port_prepends_the_template() {
    let mut rig = Rig::new(1500);
    rig.encap_flow(REMOTE_IP);
    let inner = inner_frame(100);
    rig.inject(2, &inner);
    rig.inject(2, &inner);
    assert_eq!(rig.engine.round(), 2);
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 2);
    let f = &sent[0];
    assert_eq!(f.len(), inner.len() + OUTER_LEN);
    assert_eq!(&f[0..6], &REMOTE_MAC);
    assert_eq!(&f[6..12], &LOCAL_MAC);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.check_tunnel_header(), Ok(f.len() - 14));
    assert_eq!((ip.src(), ip.dst(), ip.ttl()), (LOCAL_IP, REMOTE_IP, 64));
    assert_eq!(ip.flags_frag(), 0x4000, "DF");
    let udp = UdpPacket::new_checked(&f[34..]).unwrap();
    assert_eq!(udp.dst_port(), 4789);
    assert_eq!(udp.checksum(), 0);
    let same_flow = UdpPacket::new_checked(&sent[1][34..]).unwrap();
    assert_eq!(
        udp.src_port(),
        same_flow.src_port(),
        "one flow, one source port"
    );
    assert_ne!(
        ip.ident(),
        Ipv4Packet::new_checked(&sent[1][14..]).unwrap().ident()
    );
    // What the far end sees: our inner frame and VNI.
    assert_carries(f, &inner);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

/// What the far end sees of `outer`: a valid VXLAN packet to the remote
/// node from our address, with our VNI, around `inner`.
fn assert_carries(outer: &[u8], inner: &[u8]) {
    let d = decap(outer, REMOTE_IP, 4789).expect("valid VXLAN");
    assert_eq!(&outer[d.offset..d.offset + d.len], inner);
    assert_eq!(d.meta.tun_id, VNI);
    assert_eq!(d.meta.tun_src, LOCAL_IP);
}

#[test]
fn encap_drops_are_counted_and_never_sent() {
    // MTU 1400: a 1400-byte inner frame is 1436 bytes of outer IPv4.
    let mut rig = Rig::new(1400);
    rig.encap_flow(REMOTE_IP);
    rig.inject(2, &inner_frame(1400 - 36 - 42)); // fits exactly
    rig.inject(2, &inner_frame(1400 - 36 - 42 + 1)); // one byte over
    rig.engine.round();
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].len() - 14, 1400);
    assert_eq!(rig.engine.drops.tunnel.too_big, 1);

    // A destination that has no route via the uplink.
    rig.neigh.publish(Snapshot::from_entries([
        (REMOTE_IP, Entry::Ready(template_to_remote())),
        (UNRESOLVED_IP, Entry::NoRoute),
    ]));
    rig.encap_flow(UNRESOLVED_IP);
    rig.inject(2, &inner_frame(10));
    rig.engine.round();
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.engine.drops.tunnel.no_route, 1);

    // No tun_dst at all.
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, 3);
    rig.flow(
        100,
        m,
        vec![Action::Output {
            port: 1,
            max_len: 0,
        }],
    );
    rig.inject(3, &inner_frame(10));
    rig.engine.round();
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.engine.drops.tunnel.no_destination, 1);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

#[test]
fn a_frame_without_headroom_is_dropped_not_corrupted() {
    let mut rig = Rig::new(1500);
    rig.encap_flow(REMOTE_IP);
    let desc = rig.engine.frames_mut().load(&inner_frame(10)).unwrap();
    assert_eq!(rig.engine.frames_mut().headroom(desc.addr), 0);
    rig.engine.port_io_mut(1).unwrap().mem().rx.push_back(desc);
    rig.engine.round();
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.engine.drops.tunnel.no_headroom, 1);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn received_vxlan_enters_the_pipeline_with_tunnel_metadata() {
    let mut rig = Rig::new(1500);
    // Only VNI VNI from REMOTE_IP to LOCAL_IP reaches port 2; anything
    // else from the tunnel hits the lower-priority flow to port 3.
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, 1);
    m.set_exact(Field::TunId, VNI);
    m.set_exact(Field::TunSrc, u64::from(REMOTE_IP));
    m.set_exact(Field::TunDst, u64::from(LOCAL_IP));
    rig.flow(
        200,
        m,
        vec![Action::Output {
            port: 2,
            max_len: 0,
        }],
    );
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, 1);
    rig.flow(
        100,
        m,
        vec![Action::Output {
            port: 3,
            max_len: 0,
        }],
    );
    let inner = inner_frame(64);
    rig.inject(1, &from_remote(&inner, VNI as u32));
    rig.inject(1, &from_remote(&inner, 7));
    rig.engine.round();
    assert_eq!(rig.sent(2), vec![inner.clone()], "decapsulated in place");
    assert_eq!(rig.sent(3), vec![inner.clone()], "other VNI");
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn malformed_vxlan_is_dropped_per_reason() {
    let mut rig = Rig::new(1500);
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, 1);
    rig.flow(
        100,
        m,
        vec![Action::Output {
            port: 2,
            max_len: 0,
        }],
    );
    let good = from_remote(&inner_frame(20), 5);
    let mut flags = good.clone();
    flags[42] = 0x0c;
    let mut short = good.clone();
    short.truncate(OUTER_LEN + 10);
    let mut ip_csum = good.clone();
    ip_csum[24] ^= 1;
    let mut udp_len = good.clone();
    udp_len[39] ^= 4;
    let mut other_port = good.clone();
    other_port[37] = 0xb6; // 4790
    for f in [&good, &flags, &short, &ip_csum, &udp_len, &other_port] {
        rig.inject(1, f);
    }
    rig.engine.round();
    assert_eq!(rig.sent(2).len(), 1, "only the good one");
    let d = rig.engine.drops.tunnel;
    assert_eq!(
        d,
        TunnelDrops {
            bad_flags: 1,
            truncated: 1,
            bad_outer_ip: 1,
            bad_udp: 1,
            not_vxlan: 1,
            ..TunnelDrops::default()
        }
    );
    assert_eq!(d.malformed(), 4);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn a_copy_is_encapsulated_without_touching_the_other_output() {
    let mut rig = Rig::new(1500);
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, 2);
    // VXLAN first (a copy, since another output follows), then a local
    // port, which must get the plain inner frame.
    rig.flow(
        100,
        m,
        vec![
            Action::SetField {
                field: Field::TunDst,
                value: u64::from(REMOTE_IP),
            },
            Action::Output {
                port: 1,
                max_len: 0,
            },
            Action::Output {
                port: 3,
                max_len: 0,
            },
        ],
    );
    let inner = inner_frame(40);
    rig.inject(2, &inner);
    rig.engine.round();
    let tunnelled = rig.sent(1);
    assert_eq!(tunnelled.len(), 1);
    assert_eq!(&tunnelled[0][OUTER_LEN..], &inner[..]);
    assert_eq!(rig.sent(3), vec![inner]);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

/// The inner UDP payload lengths of frames sent on the VXLAN port.
fn payload_lens(sent: &[Vec<u8>]) -> Vec<usize> {
    sent.iter().map(|f| f.len() - OUTER_LEN - 42).collect()
}

#[test]
fn frames_wait_for_their_next_hop_and_leave_in_order() {
    let mut rig = Rig::new(1500);
    rig.encap_flow(UNRESOLVED_IP);
    for len in [10, 20, 30] {
        rig.inject(2, &inner_frame(len));
    }
    rig.engine.round();
    rig.engine.round();
    assert!(
        rig.sent(1).is_empty(),
        "nothing sent before the next hop is known"
    );
    assert_eq!(rig.engine.drops.tunnel.no_neighbour, 0);
    assert_eq!(rig.engine.drops.tunnel.waited_for_neighbour, 3);
    assert_eq!(rig.free_frames(), N_FRAMES as usize - 3, "the frames wait");

    // Resolved: the waiting frames go first, then the round's own.
    rig.resolve(UNRESOLVED_IP);
    rig.inject(2, &inner_frame(40));
    rig.engine.round();
    let sent = rig.sent(1);
    assert_eq!(payload_lens(&sent), vec![10, 20, 30, 40]);
    let ip = Ipv4Packet::new_checked(&sent[0][14..]).unwrap();
    assert_eq!(ip.dst(), UNRESOLVED_IP);
    assert_eq!(rig.engine.drops.tunnel.no_neighbour, 0);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

#[test]
fn waiting_frames_are_bounded_and_dropped_when_their_next_hop_fails() {
    let mut rig = Rig::new(1500);
    rig.encap_flow(UNRESOLVED_IP);
    // One destination holds at most 32 frames; the 33rd is dropped at once.
    for _ in 0..33 {
        rig.inject(2, &inner_frame(10));
    }
    rig.engine.round();
    assert_eq!(rig.engine.drops.tunnel.no_neighbour, 1);
    assert_eq!(rig.free_frames(), N_FRAMES as usize - 32);
    // The route goes away: they are dropped for that reason.
    rig.neigh
        .publish(Snapshot::from_entries([(UNRESOLVED_IP, Entry::NoRoute)]));
    rig.engine.round();
    assert_eq!(rig.engine.drops.tunnel.no_route, 32);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);

    // Never resolved: dropped after the kernel's 3 s of ARP.
    rig.neigh.publish(Snapshot::default());
    rig.inject(2, &inner_frame(10));
    rig.engine.round();
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    rig.engine.round();
    assert_eq!(
        rig.free_frames(),
        N_FRAMES as usize - 1,
        "still waiting at 2.5 s"
    );
    std::thread::sleep(std::time::Duration::from_millis(600));
    rig.engine.round();
    assert_eq!(rig.engine.drops.tunnel.no_neighbour, 2);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

#[test]
fn a_packet_out_to_the_vxlan_port_is_encapsulated() {
    let mut rig = Rig::new(1500);
    let inner = inner_frame(100);
    let actions = encap_actions(REMOTE_IP);
    rig.shared
        .packet_out(0xffff_fffd, Vec::new(), actions, inner.clone())
        .expect("queued");
    rig.engine.round();
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 1, "drops: {:?}", rig.engine.drops.tunnel);
    assert_carries(&sent[0], &inner);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

#[test]
fn waiting_frames_are_not_sent_once_the_port_is_down() {
    let mut rig = Rig::new(1500);
    rig.encap_flow(UNRESOLVED_IP);
    rig.inject(2, &inner_frame(10));
    rig.engine.round();
    rig.metas[0].config.store(
        dataplane::control::port_config::PORT_DOWN,
        std::sync::atomic::Ordering::Relaxed,
    );
    rig.resolve(UNRESOLVED_IP);
    rig.engine.round();
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.engine.drops.port_down, 1);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

/// The inner flow's hash as computed from a parse of `frame`.
fn hash_of(frame: &[u8]) -> u32 {
    let mut key = flowtable::FlowKey::zero();
    xbr_packet::parse::extract(frame, 1, &mut key);
    dataplane::vxlan::encap::flow_hash(&key)
}

/// A packet is parsed once on its way from a pod through `ct()` to the
/// VXLAN port, and once from the VXLAN port through `ct()` to a pod: the
/// conntrack tuple, the recirculated pass and the outer source port all
/// come from that one parse. An action that rewrites the frame before
/// the tunnel output makes one more parse, and the source port is then
/// the rewritten flow's.
#[test]
fn a_packet_is_parsed_once_through_ct_and_the_tunnel() {
    let mut rig = Rig::new(1500);
    for f in [
        "table=0, priority=100, in_port=2, ip, actions=ct(commit,table=1)",
        "table=1, priority=100, in_port=2, ip, \
         actions=set_field:10.0.0.12->tun_dst,set_field:0x123456->tun_id,output:1",
        "table=1, priority=200, in_port=2, udp, tp_dst=54, \
         actions=mod_tp_dst:55,set_field:10.0.0.12->tun_dst,set_field:0x123456->tun_id,output:1",
        "table=0, priority=100, in_port=1, ip, actions=ct(table=1)",
        "table=1, priority=100, in_port=1, ip, actions=output:3",
    ] {
        let fm = flowtable::text::parse_flow(f).expect("flow parses");
        let changes = rig.tables.flow_mod(&fm).expect("valid flow");
        rig.shared.publish(changes);
    }
    rig.engine.apply_changes();
    let inner = inner_frame(10);
    for _ in 0..4 {
        rig.inject(2, &inner);
    }
    rig.engine.round();
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 4);
    assert_carries(&sent[0], &inner);
    let pmd = rig.engine.pmd;
    assert_eq!((pmd.received, pmd.recirculations), (4, 4));
    assert_eq!(pmd.parses, 4, "one parse per packet");
    let sport = UdpPacket::new_checked(&sent[0][34..]).unwrap().src_port();
    assert_eq!(sport, src_port(hash_of(&inner)));

    // The other way: decapsulated, tracked, to the pod.
    let mut reply = inner.clone();
    reply[26..30].copy_from_slice(&inner[30..34]);
    reply[30..34].copy_from_slice(&inner[26..30]);
    for _ in 0..3 {
        rig.inject(1, &from_remote(&reply, VNI as u32));
    }
    rig.engine.round();
    assert_eq!(rig.sent(3), vec![reply.clone(); 3]);
    assert_eq!(rig.engine.pmd.parses, 4 + 3);

    // A rewrite before the tunnel output: parsed again for the hash.
    let mut to_54 = inner.clone();
    to_54[36..38].copy_from_slice(&54u16.to_be_bytes());
    let mut to_55 = to_54.clone();
    to_55[36..38].copy_from_slice(&55u16.to_be_bytes());
    rig.inject(2, &to_54);
    rig.engine.round();
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 1);
    assert_eq!(rig.engine.pmd.parses, 7 + 2);
    let sport = UdpPacket::new_checked(&sent[0][34..]).unwrap().src_port();
    assert_eq!(sport, src_port(hash_of(&to_55)));
    assert_ne!(src_port(hash_of(&to_55)), src_port(hash_of(&to_54)));
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}
