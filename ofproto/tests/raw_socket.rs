//! Hand-made byte streams: framing errors, unknown types, bad versions,
//! ONF bundles. The connection must answer with the right OFPT_ERROR and,
//! where the error is recoverable, keep answering afterwards.

mod common;
use common::{read_msg, Harness};
use ofproto::wire::message::split;
use ofproto::wire::multipart::MultipartRequest;
use ofproto::wire::Message;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;

fn decode(m: &[u8]) -> (u32, Message) {
    let (h, body) = split(m).unwrap();
    (h.xid, Message::parse(&h, body).unwrap())
}

/// Connects and consumes the switch's HELLO after sending ours.
fn connect(h: &Harness) -> UnixStream {
    let mut s = UnixStream::connect(&h.sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&Message::Hello { bitmap: Some(0x10) }.emit(1))
        .unwrap();
    let hello = read_msg(&mut s).unwrap();
    assert_eq!(hello, [4, 0, 0, 16, 0, 0, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0x10]);
    s
}

fn expect_error(s: &mut UnixStream, xid: u32, ty: u16, code: u16) -> Vec<u8> {
    match decode(&read_msg(s).unwrap()) {
        (
            x,
            Message::Error {
                ty: t,
                code: c,
                data,
            },
        ) => {
            assert_eq!((x, t, c), (xid, ty, code));
            data
        }
        other => panic!("expected error, got {other:?}"),
    }
}

fn echo_works(s: &mut UnixStream) {
    s.write_all(&Message::EchoRequest(b"ping".to_vec()).emit(99))
        .unwrap();
    assert_eq!(
        decode(&read_msg(s).unwrap()),
        (99, Message::EchoReply(b"ping".to_vec()))
    );
}

#[test]
fn unknown_type_then_echo() {
    let h = Harness::start("unknown");
    let mut s = connect(&h);
    let msg = [4u8, 42, 0, 8, 0, 0, 0, 7];
    s.write_all(&msg).unwrap();
    let data = expect_error(&mut s, 7, 1, 1); // BAD_REQUEST / BAD_TYPE
    assert_eq!(data, msg);
    echo_works(&mut s);
}

#[test]
fn bad_version_then_echo() {
    let h = Harness::start("version");
    let mut s = connect(&h);
    s.write_all(&[1u8, 5, 0, 8, 0, 0, 0, 3]).unwrap();
    expect_error(&mut s, 3, 1, 0); // BAD_REQUEST / BAD_VERSION
    echo_works(&mut s);
}

#[test]
fn bad_match_field_then_echo() {
    let h = Harness::start("badmatch");
    let mut s = connect(&h);
    let mut fm = Message::FlowMod(flowtable::FlowMod::add(
        0,
        1,
        Default::default(),
        Default::default(),
    ))
    .emit(5);
    // Replace the empty match (type 1, length 4, 4 pad) by one with an
    // unknown OXM field 0x8000/60.
    fm.truncate(48);
    fm.extend_from_slice(&[0, 1, 0, 12, 0x80, 0, 60 << 1, 4, 0, 0, 0, 1, 0, 0, 0, 0]);
    let len = fm.len() as u16;
    fm[2..4].copy_from_slice(&len.to_be_bytes());
    s.write_all(&fm).unwrap();
    expect_error(&mut s, 5, 4, 6); // BAD_MATCH / BAD_FIELD
    echo_works(&mut s);
}

#[test]
fn length_below_header_closes_after_error() {
    let h = Harness::start("badlen");
    let mut s = connect(&h);
    s.write_all(&[4u8, 2, 0, 4, 0, 0, 0, 9]).unwrap();
    expect_error(&mut s, 9, 1, 6); // BAD_REQUEST / BAD_LEN
    assert!(read_msg(&mut s).is_none(), "connection must be closed");
}

#[test]
fn truncated_header_is_a_short_read() {
    let h = Harness::start("short");
    let mut s = connect(&h);
    s.write_all(&[4u8, 2, 0]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(&[8, 0, 0, 0, 4]).unwrap();
    assert_eq!(
        decode(&read_msg(&mut s).unwrap()),
        (4, Message::EchoReply(vec![]))
    );
}

#[test]
fn several_connections_at_once() {
    let h = Harness::start("multi");
    let mut a = connect(&h);
    let mut b = connect(&h);
    echo_works(&mut b);
    echo_works(&mut a);
}

#[test]
fn table_features_replies_are_split() {
    let h = Harness::start("tf");
    let mut s = connect(&h);
    s.write_all(&Message::MultipartRequest(MultipartRequest::TableFeatures).emit(11))
        .unwrap();
    let mut tables = 0;
    loop {
        let m = read_msg(&mut s).unwrap();
        assert!(m.len() <= 65535);
        assert_eq!(
            (m[1], u32::from_be_bytes([m[4], m[5], m[6], m[7]])),
            (19, 11)
        );
        let more = u16::from_be_bytes([m[10], m[11]]) & 1 != 0;
        let mut pos = 16;
        while pos < m.len() {
            assert_eq!(m[pos + 2], tables as u8);
            tables += 1;
            pos += usize::from(u16::from_be_bytes([m[pos], m[pos + 1]]));
        }
        if !more {
            break;
        }
    }
    assert_eq!(tables, 254);
}

/// Found by the connection fuzzer: a peer whose very first header has a
/// length below 8 got the BAD_LEN error before the switch's HELLO (which
/// waits for the peer's offer on a passive connection).
#[test]
fn hello_precedes_the_error_for_a_broken_first_header() {
    let h = Harness::start("raw-first-header");
    let mut s = UnixStream::connect(&h.sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&[4, 0, 0, 0, 0, 0, 0, 9]).unwrap();
    let hello = read_msg(&mut s).unwrap();
    assert_eq!(hello[..2], [4, 0], "first message is not an OF1.3 HELLO");
    expect_error(&mut s, 9, 1, 6); // BAD_REQUEST / BAD_LEN
}
