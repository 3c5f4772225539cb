//! `ct()` in the packet engine over in-memory ports: recirculation with
//! ct_state, a NetworkPolicy-like pipeline (allowed connections and their
//! replies pass, denied and out-of-window packets do not), SNAT with the
//! replies un-NATed, ct_label set on commit and matched after
//! recirculation, and bounded recirculation.

use dataplane::conntrack::{Conntrack, CtConfig, Timeouts};
use dataplane::control::{ChangeReceiver, DpShared, PortMeta};
use dataplane::engine::{Engine, MAX_RECIRC_DEPTH};
use dataplane::memport::{ArenaFrames, MemPort};
use flowtable::FlowTables;
use ofproto::Datapath;
use std::sync::Arc;

const N_FRAMES: u32 = 256;
const A: [u8; 4] = [10, 128, 0, 2];
const B: [u8; 4] = [10, 128, 0, 3];
const C: [u8; 4] = [10, 128, 0, 4];
const EXT: [u8; 4] = [1, 1, 1, 1];
const NODE: [u8; 4] = [10, 0, 0, 11];

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Ethernet + IPv4 + TCP with correct checksums.
fn tcp(
    src: [u8; 4],
    sport: u16,
    dst: [u8; 4],
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
) -> Vec<u8> {
    let payload = 16usize;
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    let total = (20 + 20 + payload) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = !fold(sum16(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut l4 = vec![0u8; 20 + payload];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[4..8].copy_from_slice(&seq.to_be_bytes());
    l4[8..12].copy_from_slice(&ack.to_be_bytes());
    l4[12] = 5 << 4;
    l4[13] = flags;
    l4[14..16].copy_from_slice(&64000u16.to_be_bytes());
    let s = sum16(&l4) + sum16(&src) + sum16(&dst) + 6 + l4.len() as u32;
    let c = !fold(s);
    l4[16..18].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&l4);
    f
}

fn checksums_ok(f: &[u8]) -> bool {
    let ip = &f[14..34];
    let l4 = &f[34..];
    fold(sum16(ip)) == 0xffff
        && fold(sum16(l4) + sum16(&ip[12..20]) + u32::from(ip[9]) + l4.len() as u32) == 0xffff
}

struct Rig {
    engine: Engine<ArenaFrames, MemPort>,
    shared: Arc<DpShared>,
    tables: FlowTables,
    ct: Arc<Conntrack>,
}

impl Rig {
    /// Ports 1..=n, the flows given in ovs-ofctl syntax.
    fn new(n: u32, flows: &[&str]) -> Rig {
        let metas: Vec<Arc<PortMeta>> = (1..=n)
            .map(|p| Arc::new(PortMeta::new(p, format!("p{p}"), [2, 0, 0, 0, 1, p as u8])))
            .collect();
        let (shared, changes): (Arc<DpShared>, ChangeReceiver) =
            DpShared::new(1, metas.clone()).expect("eventfd");
        let ports = metas
            .iter()
            .map(|m| (m.clone(), MemPort::default()))
            .collect();
        let mut engine = Engine::new(
            ArenaFrames::new(N_FRAMES, 2048),
            ports,
            shared.clone(),
            changes,
        );
        let ct = Arc::new(Conntrack::new(CtConfig {
            limit: 100,
            timeouts: Timeouts::default(),
        }));
        engine.set_conntrack(ct.clone());
        let mut rig = Rig {
            engine,
            shared,
            tables: FlowTables::new(),
            ct,
        };
        for f in flows {
            let fm = flowtable::text::parse_flow(f).expect("flow parses");
            let changes = rig.tables.flow_mod(&fm).expect("valid flow");
            rig.shared.publish(changes);
        }
        rig.engine.apply_changes();
        rig
    }

    /// Sends `frame` into `ofport` and returns what each port sent.
    fn send(&mut self, ofport: u32, frame: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let desc = self.engine.frames_mut().load(frame).expect("a free frame");
        self.engine
            .port_io_mut((ofport - 1) as usize)
            .expect("port")
            .rx
            .push_back(desc);
        assert_eq!(self.engine.round(), 1);
        let mut out = Vec::new();
        let mut p = 0;
        while let Some(io) = self.engine.port_io_mut(p) {
            for f in std::mem::take(&mut io.sent) {
                out.push((p as u32 + 1, f));
            }
            p += 1;
        }
        assert_eq!(
            self.engine.frames_mut().free_frames(),
            N_FRAMES as usize,
            "a frame leaked"
        );
        out
    }

    fn ports(&mut self, ofport: u32, frame: &[u8]) -> Vec<u32> {
        self.send(ofport, frame)
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }
}

/// The agent's conntrack skeleton with a NetworkPolicy: A may connect to
/// B, nobody else to anyone; replies always pass; invalid packets drop.
/// Ports: A=1, B=2, C=3.
const POLICY: &[&str] = &[
    "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)",
    "table=0, priority=900, ip, ct_state=+trk+inv, actions=drop",
    "table=0, priority=100, ip, actions=goto_table:30",
    "table=30, priority=100, ip, ct_state=-rpl, actions=ct(commit,table=31)",
    "table=30, priority=0, actions=goto_table:31",
    "table=31, priority=100, ip, nw_dst=10.128.0.2, actions=load:1->NXM_NX_REG2[],goto_table:80",
    "table=31, priority=100, ip, nw_dst=10.128.0.3, actions=load:2->NXM_NX_REG2[],goto_table:80",
    "table=31, priority=100, ip, nw_dst=10.128.0.4, actions=load:3->NXM_NX_REG2[],goto_table:80",
    "table=80, priority=200, ip, ct_state=+rpl, actions=output:NXM_NX_REG2[]",
    "table=80, priority=150, ip, nw_src=10.128.0.2, nw_dst=10.128.0.3, actions=output:NXM_NX_REG2[]",
    "table=80, priority=0, actions=drop",
];

#[test]
fn tcp_handshake_through_ct_recirculation_and_policy() {
    let mut rig = Rig::new(3, POLICY);
    assert_eq!(rig.ports(1, &tcp(A, 40000, B, 80, 1000, 0, SYN)), vec![2]);
    assert_eq!(rig.ct.len(), 1, "the allowed connection is committed");
    // B may not connect to A, but B's replies to A pass.
    assert_eq!(
        rig.ports(2, &tcp(B, 80, A, 40000, 5000, 1001, SYN | ACK)),
        vec![1]
    );
    assert_eq!(
        rig.ports(1, &tcp(A, 40000, B, 80, 1001, 5001, ACK)),
        vec![2]
    );
    assert_eq!(
        rig.ports(2, &tcp(B, 80, A, 40000, 5001, 1017, ACK)),
        vec![1]
    );
    assert!(rig.ports(2, &tcp(B, 81, A, 40001, 7, 0, SYN)).is_empty());
    assert!(rig.ports(3, &tcp(C, 40000, B, 80, 1, 0, SYN)).is_empty());
    // A segment far outside the window is +inv and dropped; the
    // connection goes on.
    assert!(rig
        .ports(1, &tcp(A, 40000, B, 80, 1017 + 40_000_000, 5017, ACK))
        .is_empty());
    assert_eq!(
        rig.ports(1, &tcp(A, 40000, B, 80, 1017, 5017, ACK)),
        vec![2]
    );
    // The drops were the flows' decision; nothing hit the recirculation
    // limit.
    assert_eq!(rig.engine.drops.ct_recirc_depth, 0);
    let dump: Vec<String> = rig
        .ct
        .dump(None, rig.ct.now_ms())
        .iter()
        .map(dataplane::conntrack::format_entry)
        .collect();
    // Like the agent's table 30, the pipeline commits before the ingress
    // policy, so the two denied attempts are tracked too (and never
    // answered: their SYNs were dropped).
    assert_eq!(dump.len(), 3, "{dump:#?}");
    assert_eq!(
        dump[0],
        "tcp,orig=(src=10.128.0.2,dst=10.128.0.3,sport=40000,dport=80),\
         reply=(src=10.128.0.3,dst=10.128.0.2,sport=80,dport=40000),\
         protoinfo=(state=ESTABLISHED)"
    );
    assert!(
        dump[1].ends_with("protoinfo=(state=SYN_SENT)"),
        "{}",
        dump[1]
    );
}

#[test]
fn snat_to_the_uplink_and_replies_un_natted() {
    // Port 1: pod A; port 2: the uplink.
    let mut rig = Rig::new(
        2,
        &[
            "table=0, priority=100, in_port=1, ip, actions=ct(commit,nat(src=10.0.0.11)),output:2",
            "table=0, priority=100, in_port=2, ip, actions=ct(nat,table=1)",
            "table=1, priority=100, ip, ct_state=+trk+rpl, actions=output:1",
        ],
    );
    let out = rig.send(1, &tcp(A, 40000, EXT, 80, 1000, 0, SYN));
    assert_eq!(out.len(), 1);
    let (port, f) = &out[0];
    assert_eq!(*port, 2);
    assert_eq!(&f[26..30], &NODE, "source translated");
    assert!(checksums_ok(f));
    let out = rig.send(2, &tcp(EXT, 80, NODE, 40000, 5000, 1001, SYN | ACK));
    assert_eq!(out.len(), 1);
    let (port, f) = &out[0];
    assert_eq!(*port, 1);
    assert_eq!(&f[30..34], &A, "reply destination un-NATed");
    assert!(checksums_ok(f));
    // Something for the node that is no reply is not for the pod.
    assert!(rig
        .ports(2, &tcp(EXT, 80, NODE, 40001, 1, 0, SYN))
        .is_empty());
}

#[test]
fn ct_with_table_forks_and_the_original_goes_on_untracked() {
    let mut rig = Rig::new(
        3,
        &[
            "table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1),output:3",
            "table=1, priority=100, ip, ct_state=+trk+new, actions=output:2",
        ],
    );
    let mut ports = rig.ports(1, &tcp(A, 1, B, 2, 1, 0, SYN));
    ports.sort_unstable();
    assert_eq!(ports, vec![2, 3]);
}

#[test]
fn endless_recirculation_is_cut_and_counted() {
    let mut rig = Rig::new(2, &["table=0, priority=100, ip, actions=ct(table=0)"]);
    assert!(rig.ports(1, &tcp(A, 1, B, 2, 1, 0, SYN)).is_empty());
    assert_eq!(rig.engine.drops.ct_recirc_depth, 1);
    let _ = MAX_RECIRC_DEPTH;
}

#[test]
fn ct_commit_without_table_goes_on_with_the_next_action() {
    // The agent's egress-IP flow shape: ct(commit) before the output.
    let mut rig = Rig::new(
        2,
        &["table=0, priority=100, ip, actions=ct(commit,zone=5,exec(set_field:0x7->ct_mark)),output:2"],
    );
    let frame = tcp(A, 1, B, 2, 1, 0, SYN);
    let out = rig.send(1, &frame);
    assert_eq!(out, vec![(2, frame)], "sent on, unchanged");
    let dump: Vec<String> = rig
        .ct
        .dump(Some(5), rig.ct.now_ms())
        .iter()
        .map(dataplane::conntrack::format_entry)
        .collect();
    assert_eq!(dump.len(), 1);
    assert!(
        dump[0].ends_with(",zone=5,mark=7,protoinfo=(state=SYN_SENT)"),
        "{}",
        dump[0]
    );
}

#[test]
fn a_label_set_on_commit_admits_the_connection_after_recirculation() {
    // Table 0 labels what A starts (bit 0) and commits C's without one;
    // table 1 (after recirculation) forwards only labelled connections,
    // in both directions.
    let mut rig = Rig::new(
        3,
        &[
            "table=0, priority=100, ip, nw_src=10.128.0.2, actions=ct(commit,exec(set_field:0x1/0x1->ct_label),table=1)",
            "table=0, priority=90, ip, nw_src=10.128.0.4, actions=ct(commit,table=1)",
            "table=0, priority=80, ip, actions=ct(table=1)",
            "table=1, priority=100, ip, ct_label=0x1/0x1, nw_dst=10.128.0.3, actions=output:2",
            "table=1, priority=100, ip, ct_label=0x1/0x1, nw_dst=10.128.0.2, actions=output:1",
            "table=1, priority=0, actions=drop",
        ],
    );
    assert_eq!(rig.ports(1, &tcp(A, 40000, B, 80, 1000, 0, SYN)), vec![2]);
    assert_eq!(
        rig.ports(2, &tcp(B, 80, A, 40000, 5000, 1001, SYN | ACK)),
        vec![1],
        "the reply carries the connection's label"
    );
    assert!(
        rig.ports(3, &tcp(C, 40000, B, 80, 1, 0, SYN)).is_empty(),
        "committed without a label"
    );
    let dump: Vec<String> = rig
        .ct
        .dump(None, rig.ct.now_ms())
        .iter()
        .map(dataplane::conntrack::format_entry)
        .collect();
    assert_eq!(dump.len(), 2, "{dump:#?}");
    assert!(dump[0].contains(",labels=0x1,"), "{}", dump[0]);
    assert!(!dump[1].contains("labels="), "{}", dump[1]);
}

#[test]
fn ct_commit_then_drop_still_commits() {
    let mut rig = Rig::new(2, &["table=0, priority=100, ip, actions=ct(commit)"]);
    assert!(rig.ports(1, &tcp(A, 1, B, 2, 1, 0, SYN)).is_empty());
    assert_eq!(rig.ct.len(), 1);
    assert_eq!(rig.engine.drops.explicit, 1);
}

/// Splits an Ethernet + IPv4 frame (20-byte IP header) into a first
/// fragment with `first_len` bytes of IP payload (a multiple of 8) and a
/// last fragment with the rest, both with IP identification `id`.
fn fragments(frame: &[u8], first_len: usize, id: u16) -> [Vec<u8>; 2] {
    let payload = &frame[34..];
    let piece = |bytes: &[u8], more: bool, offset: usize| {
        let mut f = frame[..34].to_vec();
        f.extend_from_slice(bytes);
        f[16..18].copy_from_slice(&((20 + bytes.len()) as u16).to_be_bytes());
        f[18..20].copy_from_slice(&id.to_be_bytes());
        let word = (offset / 8) as u16 | if more { 0x2000 } else { 0 };
        f[20..22].copy_from_slice(&word.to_be_bytes());
        f[24..26].copy_from_slice(&[0, 0]);
        let c = !fold(sum16(&f[14..34]));
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    };
    [
        piece(&payload[..first_len], true, 0),
        piece(&payload[first_len..], false, first_len),
    ]
}

/// [`POLICY`] with a port in its allow rule, as a NetworkPolicy with
/// `ports:` has: only its datagram's first fragment carries the port.
const PORT_POLICY: &[&str] = &[
    "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)",
    "table=0, priority=900, ip, ct_state=+trk+inv, actions=drop",
    "table=0, priority=100, ip, actions=goto_table:30",
    "table=30, priority=100, ip, ct_state=-rpl, actions=ct(commit,table=31)",
    "table=30, priority=0, actions=goto_table:31",
    "table=31, priority=100, ip, nw_dst=10.128.0.2, actions=load:1->NXM_NX_REG2[],goto_table:80",
    "table=31, priority=100, ip, nw_dst=10.128.0.3, actions=load:2->NXM_NX_REG2[],goto_table:80",
    "table=80, priority=200, ip, ct_state=+rpl, actions=output:NXM_NX_REG2[]",
    "table=80, priority=150, tcp, nw_src=10.128.0.2, nw_dst=10.128.0.3, tp_dst=80, actions=output:NXM_NX_REG2[]",
    "table=80, priority=0, actions=drop",
];

#[test]
fn fragments_pass_as_their_whole_datagram_would() {
    let mut rig = Rig::new(3, PORT_POLICY);
    assert_eq!(rig.ports(1, &tcp(A, 40000, B, 80, 1000, 0, SYN)), vec![2]);
    assert_eq!(
        rig.ports(2, &tcp(B, 80, A, 40000, 5000, 1001, SYN | ACK)),
        vec![1]
    );
    // A data segment split in two: the later fragment has no TCP header,
    // yet the port rule admits it, as it admits the reassembled segment
    // in OVS's kernel datapath.
    let [first, last] = fragments(&tcp(A, 40000, B, 80, 1001, 5001, ACK), 24, 77);
    assert_eq!(rig.ports(1, &first), vec![2]);
    let sent = rig.send(1, &last);
    assert_eq!(sent.len(), 1, "the later fragment was dropped");
    assert_eq!(sent[0], (2, last.clone()), "fragments go out unchanged");
    // The reply, fragmented, passes as a reply.
    let [first, last] = fragments(&tcp(B, 80, A, 40000, 5001, 1017, ACK), 24, 78);
    assert_eq!(rig.ports(2, &first), vec![1]);
    assert_eq!(rig.ports(2, &last), vec![1]);
    // A later fragment whose first never came is invalid and dropped.
    let [_, orphan] = fragments(&tcp(A, 40000, B, 80, 1017, 5017, ACK), 24, 79);
    assert!(rig.ports(1, &orphan).is_empty());
    // A datagram to a port the policy does not allow: both fragments
    // drop.
    let [first, last] = fragments(&tcp(A, 40001, B, 81, 1, 0, SYN), 24, 80);
    assert!(rig.ports(1, &first).is_empty());
    assert!(rig.ports(1, &last).is_empty());
}
