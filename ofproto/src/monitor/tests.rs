use super::*;
use crate::wire::monitor::flags as f;
use flowtable::text::{parse_flow, parse_flow_command};
use flowtable::FlowFilter;
use std::io::Write;

/// A writer the test can read back.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn watch(id: u32, command: Command, flags: u16, filter: FlowFilter) -> MonitorRequest {
    MonitorRequest {
        id,
        command,
        flags,
        filter,
    }
}

fn everything(id: u32, flags: u16) -> MonitorRequest {
    watch(id, Command::Add, flags, FlowFilter::default())
}

/// The events (1.4 numbering) of the updates in the messages written.
fn events_written(sink: &Sink) -> Vec<u16> {
    let bytes = std::mem::take(&mut *sink.0.lock());
    let mut out = Vec::new();
    let mut msgs = &bytes[..];
    while msgs.len() >= 8 {
        let len = usize::from(u16::from_be_bytes([msgs[2], msgs[3]]));
        let mut body = &msgs[16..len];
        while body.len() >= 4 {
            let n = usize::from(u16::from_be_bytes([body[0], body[1]]));
            out.push(u16::from_be_bytes([body[2], body[3]]));
            body = &body[n..];
        }
        msgs = &msgs[len..];
    }
    out
}

fn setup() -> (FlowMonitors, FlowTables, Sink, Arc<Outbox>) {
    let mut tables = FlowTables::new();
    tables
        .flow_mod(&parse_flow("table=0,priority=5,in_port=1,actions=output:2").unwrap())
        .unwrap();
    let sink = Sink::default();
    let writer = Outbox::start(sink.clone());
    (FlowMonitors::default(), tables, sink, writer)
}

#[test]
fn ids_are_unique_per_connection_and_requests_all_or_nothing() {
    let (m, tables, _, w) = setup();
    let add = |conn, reqs| m.request(conn, &w, 5, 1, reqs, &tables);
    add(1, vec![everything(7, f::ADD)]).unwrap();
    // Another connection may use the same id.
    add(2, vec![everything(7, f::ADD)]).unwrap();
    let e = add(1, vec![everything(8, f::ADD), everything(7, f::ADD)]).unwrap_err();
    assert_eq!(
        e.ofp_error(),
        (err::FLOW_MONITOR_FAILED, mo_err::MONITOR_EXISTS)
    );
    // Monitor 8 was not kept: the request failed as a whole.
    let del = |id| watch(id, Command::Delete, 0, FlowFilter::default());
    let e = add(1, vec![del(8)]).unwrap_err();
    assert_eq!(
        e.ofp_error(),
        (err::FLOW_MONITOR_FAILED, mo_err::UNKNOWN_MONITOR)
    );
    add(1, vec![del(7)]).unwrap();
    // 1.3 reports it with Nicira's codes.
    let e = m.cancel(1, 4, 7).unwrap_err();
    assert_eq!(e.ofp_error(), (err::EXPERIMENTER, nx_err::UNKNOWN_MONITOR));
    m.cancel(2, 4, 7).unwrap();
    let mut bad = everything(9, f::ADD);
    bad.filter.table_id = 254;
    let e = add(1, vec![bad]).unwrap_err();
    assert_eq!(e.ofp_error(), (err::BAD_REQUEST, err::BRC_BAD_TABLE_ID));
}

#[test]
fn a_request_may_add_one_monitor_and_delete_another() {
    let (m, tables, sink, w) = setup();
    m.request(3, &w, 5, 1, vec![everything(1, f::ADD)], &tables)
        .unwrap();
    let del = watch(1, Command::Delete, 0, FlowFilter::default());
    let both = vec![everything(2, f::INITIAL | f::ADD), del];
    m.request(3, &w, 5, 2, both, &tables).unwrap();
    m.flush();
    m.drained();
    // Monitor 2's initial flow, after monitor 1's empty reply.
    assert_eq!(events_written(&sink), [0]);
}

#[test]
fn updates_follow_the_initial_reply_and_only_what_was_asked() {
    let (m, mut tables, sink, w) = setup();
    m.request(
        1,
        &w,
        5,
        9,
        vec![everything(1, f::INITIAL | f::ADD)],
        &tables,
    )
    .unwrap();
    m.flush();
    m.drained();
    assert_eq!(events_written(&sink), [0]);
    fn change(m: &FlowMonitors, t: &mut FlowTables, s: &Sink, line: &str, c: C) -> Vec<u16> {
        let fm = parse_flow_command(line, c, None).unwrap();
        let changes = t.flow_mod(&fm).unwrap();
        m.queue(&changes, None, &|_| 2, t.next_rule_id());
        m.flush();
        m.drained();
        events_written(s)
    }
    use flowtable::FlowModCommand as C;
    let mut apply = |line: &str, c| change(&m, &mut tables, &sink, line, c);
    assert_eq!(apply("table=1,priority=3,ip,actions=drop", C::Add), [1]);
    // Not asked for: modifications and removals.
    assert_eq!(
        apply("table=1,ip,actions=output:1", C::Modify),
        Vec::<u16>::new()
    );
    assert_eq!(apply("table=1", C::Delete), Vec::<u16>::new());
    m.request(
        1,
        &w,
        5,
        10,
        vec![everything(2, f::REMOVED | f::MODIFY)],
        &FlowTables::new(),
    )
    .unwrap();
    assert_eq!(events_written(&sink), Vec::<u16>::new());
    m.flush();
    m.drained();
    assert_eq!(apply("table=1,priority=3,ip,actions=drop", C::Add), [1]);
    assert_eq!(
        apply("table=1,ip,actions=drop", C::Modify),
        Vec::<u16>::new()
    );
    assert_eq!(apply("table=1,ip,actions=output:3", C::Modify), [3]);
    assert_eq!(apply("table=1", C::Delete), [2]);
    m.forget(1);
    assert_eq!(
        apply("table=1,priority=3,ip,actions=drop", C::Add),
        Vec::<u16>::new()
    );
}

/// The xids of the ABBREV updates (1.4 numbering) in the messages
/// written, leaving the other updates' events to `events_written`.
fn abbreviations(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut msgs = bytes;
    while msgs.len() >= 8 {
        let len = usize::from(u16::from_be_bytes([msgs[2], msgs[3]]));
        let mut body = &msgs[16..len];
        while body.len() >= 4 {
            let n = usize::from(u16::from_be_bytes([body[0], body[1]]));
            if u16::from_be_bytes([body[2], body[3]]) == 4 {
                out.push(u32::from_be_bytes([body[4], body[5], body[6], body[7]]));
            }
            body = &body[n..];
        }
        msgs = &msgs[len..];
    }
    out
}

#[test]
fn a_connections_own_changes_are_abbreviated_unless_it_asked_for_them() {
    use flowtable::{FlowModCommand as C, PipelineMod};
    let (m, mut tables, sink, w) = setup();
    let table1 = |id, flags| {
        let mut q = everything(id, flags);
        q.filter.table_id = 1;
        q
    };
    m.request(7, &w, 5, 1, vec![table1(1, f::ADD | f::REMOVED)], &tables)
        .unwrap();
    m.flush();
    m.drained();
    sink.0.lock().clear();
    // A bundle of three from connection 7 (xids 0x11-0x13): the first
    // changes table 0, which the monitor does not watch; the other
    // two table 1. One ABBREV, with the xid of the first it selects.
    let mods: Vec<PipelineMod> = [
        "table=0,priority=9,actions=drop",
        "table=1,priority=9,ip,actions=drop",
        "table=1,priority=8,arp,actions=drop",
    ]
    .iter()
    .map(|l| PipelineMod::Flow(parse_flow_command(l, C::Add, None).unwrap()))
    .collect();
    let mut ends = Vec::new();
    let changes = tables.apply_batch_marked(&mods, &mut ends).unwrap();
    let marks: Vec<(usize, u32)> = ends.into_iter().zip([0x11, 0x12, 0x13]).collect();
    let own = Origin {
        conn: 7,
        xids: &marks,
    };
    m.queue(&changes, Some(own), &|_| 2, tables.next_rule_id());
    m.flush();
    m.drained();
    assert_eq!(abbreviations(&sink.0.lock()), [0x12]);
    assert_eq!(events_written(&sink), [4]);
    // Another connection's change, or a timeout, in full.
    let fm = parse_flow_command("table=1", C::Delete, None).unwrap();
    let changes = tables.flow_mod(&fm).unwrap();
    let theirs = Origin {
        conn: 8,
        xids: &[(changes.len(), 0x21)],
    };
    m.queue(&changes, Some(theirs), &|_| 2, tables.next_rule_id());
    m.flush();
    m.drained();
    assert_eq!(events_written(&sink), [2, 2]);
    // With ONLY_OWN (ovs-ofctl's default), its own changes in full too.
    m.request(7, &w, 5, 2, vec![table1(2, f::ADD | f::ONLY_OWN)], &tables)
        .unwrap();
    m.flush();
    m.drained();
    sink.0.lock().clear();
    let fm = parse_flow_command("table=1,priority=1,actions=drop", C::Add, None).unwrap();
    let changes = tables.flow_mod(&fm).unwrap();
    let own = Origin {
        conn: 7,
        xids: &[(changes.len(), 0x31)],
    };
    m.queue(&changes, Some(own), &|_| 2, tables.next_rule_id());
    m.flush();
    m.drained();
    assert_eq!(events_written(&sink), [1]);
}

/// A writer that writes nothing until the test opens it.
struct Held {
    open: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    sink: Sink,
}

impl Write for Held {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let (lock, cond) = &*self.open;
        let mut open = lock.lock();
        while !*open {
            cond.wait(&mut open);
        }
        self.sink.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_connection_that_falls_behind_is_paused_then_told_what_it_missed() {
    use flowtable::{FlowModCommand as C, PipelineMod};
    let mut tables = FlowTables::new();
    let sink = Sink::default();
    let open = Arc::new((Mutex::new(false), parking_lot::Condvar::new()));
    let held = Held {
        open: open.clone(),
        sink: sink.clone(),
    };
    let outbox = Outbox::start(held);
    let m = FlowMonitors::default();
    let all = f::ADD | f::REMOVED | f::MODIFY | f::INSTRUCTIONS;
    m.request(
        1,
        &outbox,
        5,
        1,
        vec![everything(1, f::INITIAL | all)],
        &tables,
    )
    .unwrap();
    m.flush();
    let mut apply = |lines: &[String], c: C| {
        let mods: Vec<PipelineMod> = lines
            .iter()
            .map(|l| PipelineMod::Flow(parse_flow_command(l, c, None).unwrap()))
            .collect();
        let changes = tables.apply_batch(&mods).unwrap();
        m.queue(&changes, None, &|_| 2, tables.next_rule_id());
        m.flush();
    };
    // More than 128 KiB of updates the peer does not read.
    let many: Vec<String> = (0..2000)
        .map(|i| {
            format!(
                "table=1,priority=5,ip,nw_dst=10.0.{}.{},actions=output:2",
                i / 256,
                i % 256
            )
        })
        .collect();
    apply(&many, C::Add);
    assert!(outbox.pending() > PAUSE_BACKLOG);
    // Paused: only the removal of a flow it knew of is sent.
    let one = |l: &str| vec![l.to_string()];
    apply(
        &one("table=1,priority=5,ip,nw_dst=10.0.0.1"),
        C::DeleteStrict,
    );
    apply(&one("table=2,priority=1,actions=drop"), C::Add);
    apply(
        &one("table=1,priority=5,ip,nw_dst=10.0.0.2,actions=output:3"),
        C::ModifyStrict,
    );
    apply(&one("table=3,priority=1,actions=drop"), C::Add);
    apply(&one("table=3"), C::Delete);
    // The peer reads again: what changed meanwhile, then RESUMED.
    *open.0.lock() = true;
    open.1.notify_all();
    outbox.wait_drained();
    let events = events_written(&sink);
    // 2000 added, PAUSED, one REMOVED, the modified old flow and the
    // new one (by id), RESUMED.
    assert_eq!(events.len(), 2000 + 1 + 1 + 2 + 1);
    assert!(events[..2000].iter().all(|&e| e == 1));
    assert_eq!(events[2000..], [5, 2, 3, 1, 6]);
    // Flowing again.
    apply(&one("table=4,priority=1,actions=drop"), C::Add);
    outbox.wait_drained();
    assert_eq!(events_written(&sink), [1]);
}
