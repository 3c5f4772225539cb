//! Asking the host's (netfilter) connection tracker about one connection,
//! over ctnetlink (`NETLINK_NETFILTER`, `IPCTNL_MSG_CT_GET`).
//!
//! The codec is just what that exchange needs: a GET request carrying a
//! tuple and a zone, and in the answer the original and reply tuples.
//! [`ConntrackMsg::parse`] validates every length once (attributes nest,
//! and the kernel is trusted no more than a packet is); the tuples it
//! returns are plain values.

use super::tuple::{icmp, Addr, Tuple};
use super::HostConntrack;
use flowtable::matching::IP_PROTO_ICMP;
use netlink_sys::Socket;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use thiserror::Error;

use crate::nlattr::{nest, put_attr, Attrs, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_ACK, NLM_F_REQUEST};

const NETLINK_NETFILTER: isize = 12;
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const NFGENMSG_LEN: usize = 4;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_STATUS: u16 = 3;
const CTA_PROTOINFO: u16 = 4;
const CTA_PROTOINFO_TCP: u16 = 1;
const CTA_PROTOINFO_TCP_STATE: u16 = 1;
const CTA_PROTOINFO_TCP_FLAGS_ORIGINAL: u16 = 4;
const CTA_PROTOINFO_TCP_FLAGS_REPLY: u16 = 5;
/// `enum tcp_conntrack`'s ESTABLISHED.
const TCP_CONNTRACK_ESTABLISHED: u8 = 3;
/// `IP_CT_TCP_FLAG_BE_LIBERAL`: no window checks in that direction.
const IP_CT_TCP_FLAG_BE_LIBERAL: u8 = 0x08;
/// `IPS_SEEN_REPLY | IPS_ASSURED | IPS_CONFIRMED`: the kernel refuses a
/// status that would clear CONFIRMED, and only ever sets the other two.
const STATUS_REPLIED: u32 = 0x2 | 0x4 | 0x8;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const CTA_PROTO_ICMP_ID: u16 = 4;
const CTA_PROTO_ICMP_TYPE: u16 = 5;
const CTA_PROTO_ICMP_CODE: u16 = 6;

/// How long one query may wait for the kernel (the packet thread waits).
pub const QUERY_TIMEOUT_MS: i64 = 20;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CtnetlinkError {
    #[error("truncated ctnetlink message at byte {0}")]
    Truncated(usize),
    #[error("ctnetlink message without {0}")]
    Missing(&'static str),
    #[error("unexpected netlink message type {0:#x}")]
    UnexpectedType(u16),
    #[error("kernel error {0}")]
    Kernel(i32),
}

/// Netlink attributes of a byte range (see `nlattr::Attrs`), a malformed
/// length as [`CtnetlinkError::Truncated`].
fn attrs(buf: &[u8], base: usize) -> impl Iterator<Item = Result<(u16, &[u8]), CtnetlinkError>> {
    Attrs::new(buf, base).map(|r| r.map_err(CtnetlinkError::Truncated))
}

fn be16(b: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(..2)?.try_into().ok()?))
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// Reads a `CTA_TUPLE_*` nest.
fn parse_tuple(nest: &[u8], zone: u16, base: usize) -> Result<Tuple, CtnetlinkError> {
    let mut t = Tuple {
        zone,
        ..Tuple::default()
    };
    let (mut have_ip, mut have_proto) = (false, false);
    for a in attrs(nest, base) {
        let (ty, p) = a?;
        match ty {
            CTA_TUPLE_IP => {
                for a in attrs(p, base) {
                    let (ty, p) = a?;
                    match ty {
                        CTA_IP_V4_SRC => {
                            t.src = Addr::v4(be32(p).ok_or(CtnetlinkError::Truncated(base))?)
                        }
                        CTA_IP_V4_DST => {
                            t.dst = Addr::v4(be32(p).ok_or(CtnetlinkError::Truncated(base))?)
                        }
                        _ => {}
                    }
                }
                have_ip = true;
            }
            CTA_TUPLE_PROTO => {
                let (mut id, mut icmp_type) = (0, 0);
                for a in attrs(p, base) {
                    let (ty, p) = a?;
                    let short = CtnetlinkError::Truncated(base);
                    match ty {
                        CTA_PROTO_NUM => t.proto = *p.first().ok_or(short)?,
                        CTA_PROTO_SRC_PORT => t.sport = be16(p).ok_or(short)?,
                        CTA_PROTO_DST_PORT => t.dport = be16(p).ok_or(short)?,
                        CTA_PROTO_ICMP_ID => id = be16(p).ok_or(short)?,
                        CTA_PROTO_ICMP_TYPE => icmp_type = *p.first().ok_or(short)?,
                        _ => {}
                    }
                }
                if t.proto == IP_PROTO_ICMP {
                    // xbr's ICMP tuple: identifier and message type.
                    t.sport = id;
                    t.dport = u16::from(icmp_type);
                }
                have_proto = true;
            }
            _ => {}
        }
    }
    match (have_ip, have_proto) {
        (true, true) => Ok(t),
        (false, _) => Err(CtnetlinkError::Missing("CTA_TUPLE_IP")),
        (_, false) => Err(CtnetlinkError::Missing("CTA_TUPLE_PROTO")),
    }
}

/// A connection as the kernel reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConntrackMsg {
    pub orig: Tuple,
    pub reply: Tuple,
}

impl ConntrackMsg {
    /// Parses one netlink message (header included): a ctnetlink
    /// connection, or `Ok(None)` for "no such connection" (ENOENT).
    pub fn parse(msg: &[u8], zone: u16) -> Result<Option<ConntrackMsg>, CtnetlinkError> {
        let len = msg
            .get(..4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or(CtnetlinkError::Truncated(0))?;
        if len < NLMSG_HDRLEN || len > msg.len() {
            return Err(CtnetlinkError::Truncated(0));
        }
        let msg = &msg[..len];
        let ty = u16::from_ne_bytes([msg[4], msg[5]]);
        if ty == NLMSG_ERROR {
            let code = msg
                .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
                .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or(CtnetlinkError::Truncated(NLMSG_HDRLEN))?;
            // A negative errno; i32::MIN has no positive counterpart (the
            // fuzzer with overflow checks found the negation's overflow).
            return match code.checked_neg() {
                Some(0) => Err(CtnetlinkError::Missing("a connection")),
                Some(libc::ENOENT) => Ok(None),
                Some(e) => Err(CtnetlinkError::Kernel(e)),
                None => Err(CtnetlinkError::Kernel(code)),
            };
        }
        if ty != (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW {
            return Err(CtnetlinkError::UnexpectedType(ty));
        }
        let base = NLMSG_HDRLEN + NFGENMSG_LEN;
        let body = msg
            .get(base..)
            .ok_or(CtnetlinkError::Truncated(NLMSG_HDRLEN))?;
        let (mut orig, mut reply) = (None, None);
        for a in attrs(body, base) {
            let (ty, p) = a?;
            match ty {
                CTA_TUPLE_ORIG => orig = Some(parse_tuple(p, zone, base)?),
                CTA_TUPLE_REPLY => reply = Some(parse_tuple(p, zone, base)?),
                _ => {}
            }
        }
        Ok(Some(ConntrackMsg {
            orig: orig.ok_or(CtnetlinkError::Missing("CTA_TUPLE_ORIG"))?,
            reply: reply.ok_or(CtnetlinkError::Missing("CTA_TUPLE_REPLY"))?,
        }))
    }
}

/// Puts `t` as a `CTA_TUPLE_*` nest of type `ty`.
fn put_tuple(out: &mut Vec<u8>, ty: u16, t: &Tuple) {
    nest(out, ty, |o| {
        nest(o, CTA_TUPLE_IP, |o| {
            put_attr(o, CTA_IP_V4_SRC, &t.src.as_v4().to_be_bytes());
            put_attr(o, CTA_IP_V4_DST, &t.dst.as_v4().to_be_bytes());
        });
        nest(o, CTA_TUPLE_PROTO, |o| {
            put_attr(o, CTA_PROTO_NUM, &[t.proto]);
            if t.proto == IP_PROTO_ICMP {
                put_attr(o, CTA_PROTO_ICMP_ID, &t.sport.to_be_bytes());
                put_attr(o, CTA_PROTO_ICMP_TYPE, &[t.dport as u8]);
                put_attr(o, CTA_PROTO_ICMP_CODE, &[0]);
            } else {
                put_attr(o, CTA_PROTO_SRC_PORT, &t.sport.to_be_bytes());
                put_attr(o, CTA_PROTO_DST_PORT, &t.dport.to_be_bytes());
            }
        });
    });
}

/// A GET request for the connection holding `t` (in either direction:
/// the kernel looks tuples up in both) in `t.zone`.
pub fn get_request(t: &Tuple, seq: u32) -> Vec<u8> {
    let mut out = vec![0u8; NLMSG_HDRLEN];
    out.extend_from_slice(&[libc::AF_INET as u8, 0, 0, 0]);
    put_tuple(&mut out, CTA_TUPLE_ORIG, t);
    put_attr(&mut out, CTA_ZONE, &t.zone.to_be_bytes());
    let len = out.len() as u32;
    out[0..4].copy_from_slice(&len.to_ne_bytes());
    let ty = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
    out[4..6].copy_from_slice(&ty.to_ne_bytes());
    out[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    out[8..12].copy_from_slice(&seq.to_ne_bytes());
    out
}

/// An update of the connection whose original tuple is `orig`: it has
/// seen a reply (and, for TCP, is established with liberal window checks
/// in both directions, the host seeing only one of them).
pub fn replied_request(orig: &Tuple, seq: u32) -> Vec<u8> {
    let mut out = vec![0u8; NLMSG_HDRLEN];
    out.extend_from_slice(&[libc::AF_INET as u8, 0, 0, 0]);
    put_tuple(&mut out, CTA_TUPLE_ORIG, orig);
    put_attr(&mut out, CTA_ZONE, &orig.zone.to_be_bytes());
    put_attr(&mut out, CTA_STATUS, &STATUS_REPLIED.to_be_bytes());
    if orig.proto == flowtable::matching::IP_PROTO_TCP {
        nest(&mut out, CTA_PROTOINFO, |o| {
            nest(o, CTA_PROTOINFO_TCP, |o| {
                put_attr(o, CTA_PROTOINFO_TCP_STATE, &[TCP_CONNTRACK_ESTABLISHED]);
                let liberal = [IP_CT_TCP_FLAG_BE_LIBERAL, IP_CT_TCP_FLAG_BE_LIBERAL];
                put_attr(o, CTA_PROTOINFO_TCP_FLAGS_ORIGINAL, &liberal);
                put_attr(o, CTA_PROTOINFO_TCP_FLAGS_REPLY, &liberal);
            });
        });
    }
    let len = out.len() as u32;
    out[0..4].copy_from_slice(&len.to_ne_bytes());
    // NEW without NLM_F_CREATE: change the existing connection only.
    let ty = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
    out[4..6].copy_from_slice(&ty.to_ne_bytes());
    out[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    out[8..12].copy_from_slice(&seq.to_ne_bytes());
    out
}

/// The host's connection tracker in the namespace xbr runs in.
pub struct Ctnetlink {
    sock: Mutex<Socket>,
    seq: AtomicU32,
}

impl Ctnetlink {
    pub fn open() -> std::io::Result<Ctnetlink> {
        use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
        use nix::sys::time::{TimeVal, TimeValLike};
        let mut sock = Socket::new(NETLINK_NETFILTER)?;
        sock.bind_auto()?;
        setsockopt(
            &sock,
            ReceiveTimeout,
            &TimeVal::milliseconds(QUERY_TIMEOUT_MS),
        )
        .map_err(std::io::Error::from)?;
        Ok(Ctnetlink {
            sock: Mutex::new(sock),
            seq: AtomicU32::new(1),
        })
    }

    /// One GET exchange; `Ok(None)` when the kernel has no such
    /// connection.
    pub fn get(&self, t: &Tuple) -> Result<Option<ConntrackMsg>, std::io::Error> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let sock = self.sock.lock();
        sock.send(&get_request(t, seq), 0)?;
        let mut buf = vec![0u8; 4096];
        loop {
            let n = sock.recv(&mut &mut buf[..], 0)?;
            let msg = &buf[..n];
            // A late answer to an earlier, timed-out query: skip it.
            if msg.len() >= 12 && u32::from_ne_bytes([msg[8], msg[9], msg[10], msg[11]]) != seq {
                continue;
            }
            return ConntrackMsg::parse(msg, t.zone)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        }
    }
}

impl Ctnetlink {
    /// Sends `msg` (with NLM_F_ACK) and waits for the kernel's answer;
    /// the kernel applies a change before it answers.
    fn change(&self, msg: &[u8], seq: u32) -> Result<(), std::io::Error> {
        let sock = self.sock.lock();
        sock.send(msg, 0)?;
        let mut buf = vec![0u8; 4096];
        loop {
            let n = sock.recv(&mut &mut buf[..], 0)?;
            let m = &buf[..n];
            if m.len() < 20 || u32::from_ne_bytes([m[8], m[9], m[10], m[11]]) != seq {
                continue;
            }
            let code = i32::from_ne_bytes([m[16], m[17], m[18], m[19]]);
            return if u16::from_ne_bytes([m[4], m[5]]) == NLMSG_ERROR && code != 0 {
                Err(std::io::Error::from_raw_os_error(code.saturating_neg()))
            } else {
                Ok(())
            };
        }
    }
}

impl Ctnetlink {
    /// Marks the host's connection `orig` as replied (see
    /// [`replied_request`]); the kernel has applied it when this returns.
    pub fn mark_replied(&self, orig: &Tuple) -> Result<(), std::io::Error> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.change(&replied_request(orig, seq), seq)
    }
}

impl HostConntrack for Ctnetlink {
    fn reply_seen(&self, host_orig: &Tuple) {
        if let Err(e) = self.mark_replied(host_orig) {
            tracing::debug!(error = %e, "ctnetlink update failed");
        }
    }

    fn lookup(&self, t: &Tuple) -> Option<(Tuple, Tuple)> {
        for q in [*t, t.reverse()] {
            match self.get(&q) {
                Ok(Some(m)) => return Some((m.orig, m.reply)),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "ctnetlink query failed");
                    return None;
                }
            }
        }
        None
    }
}

/// ICMP echo replies in the kernel's tuples carry type 0, as xbr's do.
const _: () = assert!(icmp::ECHO_REPLY == 0);

#[cfg(test)]
mod tests {
    use super::*;
    use flowtable::matching::IP_PROTO_TCP;

    fn t(src: u32, sport: u16, dst: u32, dport: u16) -> Tuple {
        Tuple::v4(0, IP_PROTO_TCP, src, dst, sport, dport)
    }

    /// A reply as the kernel builds it: header, nfgenmsg, the two tuple
    /// nests and a status attribute in between.
    fn answer(orig: &Tuple, reply: &Tuple) -> Vec<u8> {
        let mut out = vec![0u8; NLMSG_HDRLEN];
        out.extend_from_slice(&[libc::AF_INET as u8, 0, 0, 0]);
        put_tuple(&mut out, CTA_TUPLE_ORIG, orig);
        put_attr(&mut out, 3, &0x18eu32.to_be_bytes());
        put_tuple(&mut out, CTA_TUPLE_REPLY, reply);
        let len = out.len() as u32;
        out[0..4].copy_from_slice(&len.to_ne_bytes());
        out[4..6]
            .copy_from_slice(&((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW).to_ne_bytes());
        out
    }

    #[test]
    fn a_connection_answer_gives_both_tuples() {
        let orig = t(0x0a80_0002, 40000, 0xac1e_000a, 80);
        let reply = t(0x0a80_0205, 80, 0x0a80_0002, 40000);
        let m = ConntrackMsg::parse(&answer(&orig, &reply), 0)
            .unwrap()
            .unwrap();
        assert_eq!((m.orig, m.reply), (orig, reply));
    }

    #[test]
    fn icmp_tuples_use_identifier_and_type() {
        let req = Tuple::v4(0, IP_PROTO_ICMP, 1, 2, 77, u16::from(icmp::ECHO_REQUEST));
        let m = ConntrackMsg::parse(&answer(&req, &req.reverse()), 0)
            .unwrap()
            .unwrap();
        assert_eq!((m.orig, m.reply), (req, req.reverse()));
    }

    #[test]
    fn the_request_carries_the_tuple_and_zone() {
        let q = t(1, 2, 3, 4);
        let r = get_request(&q, 9);
        assert_eq!(
            u32::from_ne_bytes(r[0..4].try_into().unwrap()) as usize,
            r.len()
        );
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), 0x101);
        let attrs: Vec<_> = attrs(&r[20..], 20).map(|a| a.unwrap()).collect();
        assert_eq!(attrs.len(), 2);
        assert_eq!(parse_tuple(attrs[0].1, 0, 20).unwrap(), q);
        assert_eq!((attrs[1].0, attrs[1].1), (CTA_ZONE, &[0u8, 0][..]));
    }

    #[test]
    fn enoent_is_no_connection_and_other_errors_are_errors() {
        let mut err = vec![0u8; 36];
        err[0..4].copy_from_slice(&36u32.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(ConntrackMsg::parse(&err, 0), Ok(None));
        err[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        assert_eq!(
            ConntrackMsg::parse(&err, 0),
            Err(CtnetlinkError::Kernel(libc::EPERM))
        );
    }

    fn run(argv: &[&str]) {
        let out = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .output()
            .expect("runs");
        assert!(
            out.status.success(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Against the real kernel (root; CI runs as root): in a private
    /// network namespace, a kube-proxy-like DNAT carries a TCP
    /// connection; xbr finds the host's connection from the DNATed
    /// tuple it would see on tun0, learns the Service address to put back
    /// on replies, and the kernel accepts the "replied" update.
    #[test]
    fn learns_a_host_dnat_from_the_kernel_and_marks_it_replied() {
        use std::io::{Read, Write};
        use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
        use std::time::Duration;
        // The namespace belongs to this thread and goes away with it,
        // rules included.
        std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare (root)");
            run(&["ip", "link", "set", "lo", "up"]);
            run(&["ip", "addr", "add", "10.99.0.1/32", "dev", "lo"]);
            run(&["ip", "addr", "add", "10.99.0.2/32", "dev", "lo"]);
            run(&[
                "iptables",
                "-w",
                "5",
                "-t",
                "nat",
                "-A",
                "OUTPUT",
                "-d",
                "10.99.0.1/32",
                "-p",
                "tcp",
                "--dport",
                "80",
                "-j",
                "DNAT",
                "--to-destination",
                "10.99.0.2:8080",
            ]);
            let host = Ctnetlink::open().expect("ctnetlink");
            let nobody = t(0x0a63_0003, 1, 0x0a63_0004, 2);
            assert_eq!(
                host.get(&nobody).expect("query"),
                None,
                "ENOENT is no connection"
            );

            let l = TcpListener::bind("10.99.0.2:8080").expect("listen");
            let service = SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 1), 80);
            let mut c = TcpStream::connect_timeout(&service.into(), Duration::from_secs(2))
                .expect("connect through the DNAT");
            let (mut s, _) = l.accept().expect("accept");
            s.write_all(b"x").expect("write");
            let mut b = [0u8; 1];
            c.read_exact(&mut b).expect("read");
            let std::net::SocketAddr::V4(local) = c.local_addr().expect("addr") else {
                panic!("an IPv4 socket")
            };
            let client = u32::from(*local.ip());
            // What br0 would see from tun0: the DNATed packet.
            let seen = t(client, local.port(), 0x0a63_0002, 8080);
            let (orig, reply) = host.lookup(&seen).expect("the host's connection");
            assert_eq!(orig, t(client, local.port(), 0x0a63_0001, 80));
            assert_eq!(reply, seen.reverse());
            let learned = super::super::host::classify(&seen, (orig, reply)).expect("held");
            assert_eq!(
                learned.host_orig.map(|o| o.reverse()),
                Some(t(0x0a63_0001, 80, client, local.port())),
                "replies get the Service address back"
            );
            host.mark_replied(&orig)
                .expect("the kernel takes the update");
        })
        .join()
        .expect("the namespace thread");
    }

    #[test]
    fn hostile_answers_are_errors_not_panics() {
        let good = answer(&t(1, 2, 3, 4), &t(3, 4, 1, 2));
        for cut in 0..good.len() {
            let mut m = good[..cut].to_vec();
            if m.len() >= 4 {
                m[0..4].copy_from_slice(&(cut as u32).to_ne_bytes());
            }
            assert!(ConntrackMsg::parse(&m, 0).is_err(), "cut at {cut}");
        }
        // Attribute lengths past their nest.
        let mut bad = good.clone();
        bad[20] = 0xff;
        assert!(ConntrackMsg::parse(&bad, 0).is_err());
        // An error code no errno is (-i32::MIN overflows).
        let mut err = vec![0u8; NLMSG_HDRLEN + 4];
        let len = err.len() as u32;
        err[0..4].copy_from_slice(&len.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[NLMSG_HDRLEN..].copy_from_slice(&i32::MIN.to_ne_bytes());
        assert_eq!(
            ConntrackMsg::parse(&err, 0),
            Err(CtnetlinkError::Kernel(i32::MIN))
        );
        let mut bad = good;
        bad[4..6].copy_from_slice(&0x1234u16.to_ne_bytes());
        assert_eq!(
            ConntrackMsg::parse(&bad, 0),
            Err(CtnetlinkError::UnexpectedType(0x1234))
        );
    }
}
