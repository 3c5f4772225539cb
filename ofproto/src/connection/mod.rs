//! One OpenFlow connection: framing, version negotiation and the handling
//! of every request, each answered in order on the same thread.
//!
//! # Design
//!
//! A connection thread reads one framed message at a time with blocking
//! I/O, handles it completely (including waiting for the datapath on a
//! barrier) and writes the replies before reading the next message. That
//! gives OpenFlow's ordering guarantees for free: an error for a FLOW_MOD
//! is always written before the reply to a later BARRIER. Per-connection
//! state is the open ONF bundles, the controller role and the async
//! configuration.
//!
//! Every connection is bounded in time (see `limits.rs`): its socket has
//! a read timeout of [`TICK`], at which the thread wakes between messages
//! to act on the clock. A peer that has sent nothing within the HELLO
//! timeout is dropped; one silent for its probe interval is sent an
//! ECHO_REQUEST, and dropped if another interval passes without any
//! message, as OVS's rconn does (a controller connection is then
//! reconnected by its caller); bundles idle for the bundle idle timeout
//! are discarded with OFPBFC_TIMEOUT, as OVS's connmgr does; a connection
//! whose outbox failed (its backlog overflowed) ends.
//!
//! Threads: a connection costs two (this one and its outbox's writer)
//! for as long as it lives, which these timeouts and the per-listener
//! connection limit bound.

mod later;
mod read;
mod stats;

use read::{read_full, Filled};

use crate::bridge::Bridge;
use crate::bundle::{Bundles, CommitTo};
use crate::conn_settings::{LimitCell, ProbeCell};
use crate::counters::ControlCounters;
use crate::limits::{LimitStats, PacketInLimit};
use crate::notify::Subscription;
use crate::outbox::Outbox;
use crate::packet_in_queue::PacketInStats;
use crate::roles::ConnRole;
use crate::versions;
use crate::wire::header::msg_type;
use crate::wire::message::{capabilities, AsyncConfig, Features, RoleMsg, SwitchConfig};
use crate::wire::packet_io::PacketOut;
use crate::wire::port_status::reason as port_reason;
use crate::wire::{
    err, HeaderRepr, Message, WireError, HEADER_LEN, NO_BUFFER, OFP_VERSION, ONF_VENDOR_ID,
};
use flowtable::action::{port, N_TABLES};
use flowtable::FlowMod;
use parking_lot::Mutex;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// OFPC_FRAG_MASK: the only SET_CONFIG flags OpenFlow 1.3 defines (OVS's
/// nx-match value 3 included).
const FRAG_MASK: u16 = 3;
/// OFP_DEFAULT_MISS_SEND_LEN: a controller connection's until it sets one.
const DEFAULT_MISS_SEND_LEN: u16 = 128;

/// Bytes read from the socket at a time (at least one maximum-size
/// OpenFlow message).
const READ_BUFFER: usize = 1 << 16;

/// Transaction id of the inactivity probe's ECHO_REQUEST.
const PROBE_XID: u32 = 0;

/// The read timeout of every connection's socket: how often an idle
/// connection looks at its timeouts (OVS checks bundle expiry each
/// second too).
const TICK: Duration = Duration::from_secs(1);

/// How often a busy connection looks for expired bundles.
const BUNDLE_EXPIRY_CHECK: Duration = Duration::from_secs(1);

/// The read timeout of a connection probed each `probe`: [`TICK`], or
/// the probe interval if shorter.
pub(crate) fn read_tick(probe: Duration) -> Duration {
    probe.clamp(Duration::from_millis(1), TICK)
}

/// What to do after handling a message.
enum Next {
    Continue,
    Close,
}

pub(crate) struct Connection<R: Read> {
    /// Buffered: ovs-ofctl streams a bundle as thousands of small messages
    /// back to back, and reading each header and body straight from the
    /// socket cost two syscalls per message.
    reader: io::BufReader<R>,
    /// Everything sent to the peer, replies and (shared with the bridge's
    /// notifier and flow monitors) asynchronous messages, goes through it
    /// in order; only its own thread waits for the peer.
    outbox: Arc<Outbox>,
    bridge: Arc<Bridge>,
    bundles: Bundles,
    peer: String,
    role: ConnRole,
    async_config: Arc<Mutex<AsyncConfig>>,
    /// The masks of the kinds of asynchronous message OpenFlow 1.4 added
    /// (role status, table status, requestforward: see `wire::async14`),
    /// which xbr never sends.
    async_added: [[u32; 2]; 3],
    /// SET_CONFIG's miss_send_len, this connection's own (as in OVS).
    miss_send_len: Arc<AtomicU16>,
    /// A connection someone opened to the switch (not one to a
    /// controller): it gets asynchronous messages only while its
    /// miss_send_len is not zero.
    service: bool,
    /// Taken when the peer's HELLO is accepted, not before: HELLO must be
    /// the first message on the wire, and a PORT_STATUS or PACKET_IN
    /// raised while the connection is being set up would otherwise
    /// overtake it.
    subscription: Option<Subscription>,
    /// The inactivity probe interval (unset: never probed).
    probe: ProbeCell,
    /// Time the peer has to send its first message.
    hello_timeout: Duration,
    /// A controller's packet-in rate limit.
    packet_in_limit: Option<PacketInLimit>,
    /// Where its owner changes it while the connection runs, and the
    /// generation of the cell's limit it follows now.
    packet_in_cell: Option<(LimitCell, u64)>,
    /// Its packet-in queues' counters (used with a `packet_in_limit`).
    packet_in_stats: PacketInStats,
    stats: Arc<LimitStats>,
    /// The negotiated OpenFlow version (1.3 until a peer that offers only
    /// later versions says HELLO).
    version: u8,
    hello_sent: bool,
}

impl<R: Read> Drop for Connection<R> {
    fn drop(&mut self) {
        // The outbox's thread writes what is left and ends.
        self.outbox.close();
        ControlCounters::bump(&self.bridge.counters().connections_closed, 1);
    }
}

impl<R: Read> Connection<R> {
    /// A connection someone opened to the switch (ovs-ofctl, a passive
    /// controller): as OVS treats its service connections, its
    /// miss_send_len starts at 0 and it gets no asynchronous message
    /// until a SET_CONFIG makes it nonzero (`ovs-ofctl monitor br0
    /// 65534`); from then on those its async configuration selects (the
    /// specification's defaults until a SET_ASYNC).
    pub(crate) fn new<W: Write + Send + 'static>(
        reader: R,
        writer: W,
        bridge: Arc<Bridge>,
        peer: String,
    ) -> Self {
        let outbox = Outbox::start(writer);
        let role = bridge.roles().register();
        ControlCounters::bump(&bridge.counters().connections_opened, 1);
        let limits = bridge.control_limits();
        let async_config = Arc::new(Mutex::new(AsyncConfig::default()));
        Connection {
            reader: io::BufReader::with_capacity(READ_BUFFER, reader),
            outbox,
            role,
            async_config,
            async_added: [[0; 2]; 3],
            miss_send_len: Arc::new(AtomicU16::new(0)),
            service: true,
            subscription: None,
            probe: ProbeCell::default(),
            hello_timeout: limits.hello_timeout,
            packet_in_limit: None,
            packet_in_cell: None,
            packet_in_stats: Default::default(),
            stats: bridge.limit_stats().clone(),
            version: OFP_VERSION,
            hello_sent: false,
            bundles: Bundles::new(&limits, bridge.limit_stats().clone()),
            bridge,
            peer,
        }
    }

    /// The connection's role, as other parties read it.
    pub(crate) fn role_cell(&self) -> Arc<std::sync::atomic::AtomicU32> {
        self.role.shared()
    }

    /// Probes the peer after the interval in `probe` of silence (see the
    /// module documentation; none: never, a controller's
    /// `inactivity_probe=0` as in OVS), read at every message or tick, so
    /// its owner may change it while the connection runs; `kill` shuts
    /// its socket down, for the outbox to drop a peer too far behind. The
    /// socket's read timeout must be [`read_tick`]`(probe)` and its write
    /// timeout the probe interval (none without a probe: the backlog bound
    /// alone drops a peer that stopped reading); whoever changes the cell
    /// keeps them in step.
    pub(crate) fn bounded_by(
        mut self,
        probe: ProbeCell,
        kill: Box<dyn Fn() + Send + Sync>,
    ) -> Self {
        let limits = self.bridge.control_limits();
        self.outbox.guard(crate::outbox::Guard {
            max_backlog: limits.max_backlog,
            stats: self.stats.clone(),
            kill,
            peer: self.peer.clone(),
        });
        self.probe = probe;
        self
    }

    /// Serves the connection until the peer closes it or framing fails.
    /// What was queued for it is still written after (see `Drop`).
    pub(crate) fn run(mut self) {
        if let Err(e) = self.serve() {
            if e.kind() == io::ErrorKind::TimedOut && self.probe.get().is_some() {
                LimitStats::hit(&self.stats.message_timeouts);
                warn!(peer = %self.peer, "OpenFlow message not completed in two probe intervals; disconnecting");
                return;
            }
            if !matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
            ) {
                debug!(peer = %self.peer, error = %e, "OpenFlow connection ended");
            }
        }
    }

    /// Limits the PACKET_INs this connection is sent to what `cell` says
    /// while it runs (the passive target's `controller_rate_limit`), if
    /// there is a cell.
    pub(crate) fn packet_in_limit_by(mut self, cell: Option<LimitCell>) -> Self {
        let Some(cell) = cell else {
            return self;
        };
        let (limit, generation) = cell.current();
        self.packet_in_limit = limit;
        self.packet_in_cell = Some((cell, generation));
        self
    }

    /// Makes this the switch's connection to a controller: it says HELLO
    /// first, is sent the specification's default asynchronous messages,
    /// and its PACKET_INs are limited to `packet_in_limit`.
    pub(crate) fn for_controller(mut self, packet_in_limit: Option<PacketInLimit>) -> Self {
        self.packet_in_limit = packet_in_limit;
        self.service = false;
        self.miss_send_len
            .store(DEFAULT_MISS_SEND_LEN, Ordering::Relaxed);
        self
    }

    /// Counts its packet-in queues into `stats` (made by its owner, who
    /// reports them).
    pub(crate) fn with_packet_in_stats(mut self, stats: PacketInStats) -> Self {
        self.packet_in_stats = stats;
        self
    }

    /// [`Connection::for_controller`] with a packet-in limit its owner
    /// may change while the connection runs.
    pub(crate) fn for_controller_by(self, cell: LimitCell) -> Self {
        let (limit, generation) = cell.current();
        let mut conn = self.for_controller(limit);
        conn.packet_in_cell = Some((cell, generation));
        conn
    }

    /// Takes a packet-in limit its owner changed (see [`LimitCell`]).
    fn follow_packet_in_limit(&mut self) {
        let Some(new) = self
            .packet_in_cell
            .as_mut()
            .and_then(|(cell, seen)| cell.take_change(seen))
        else {
            return;
        };
        self.packet_in_limit = new;
        if let Some(sub) = &self.subscription {
            sub.set_packet_in_limit(new.map(|l| (l, &self.packet_in_stats)));
        }
    }

    fn serve(&mut self) -> io::Result<()> {
        // To a controller the switch says HELLO at once, offering 1.3; to
        // a peer that connected, once it knows the peer's offer (see
        // versions.rs).
        if !self.service {
            self.send_hello(OFP_VERSION)?;
        }
        let mut buf = vec![0u8; HEADER_LEN];
        let started = Instant::now();
        let mut heard = false;
        let mut last_heard = started;
        let mut probe_sent: Option<Instant> = None;
        // Bundles expire on a busy connection too (OVS times each bundle
        // from its last use, whatever else the connection sends): looked
        // at once a second between messages, and whenever it is idle.
        let mut next_expiry = started + BUNDLE_EXPIRY_CHECK;
        loop {
            self.follow_packet_in_limit();
            // A message may take up to two probe intervals to arrive.
            let patience = self.probe.get().map(|p| 2 * p);
            buf.resize(HEADER_LEN, 0);
            match read_full(&mut self.reader, &mut buf, patience)? {
                Filled::Eof => return Ok(()),
                Filled::Idle => {
                    if self.idle(Instant::now(), started, heard, last_heard, &mut probe_sent)? {
                        return Ok(());
                    }
                    continue;
                }
                Filled::Full => {
                    heard = true;
                    last_heard = Instant::now();
                    probe_sent = None;
                    if last_heard >= next_expiry {
                        next_expiry = last_heard + BUNDLE_EXPIRY_CHECK;
                        for m in self.bundles.expire(last_heard) {
                            self.send(&m)?;
                        }
                    }
                }
            }
            let Ok(view) = crate::wire::Header::new_checked(&buf[..]) else {
                return Ok(());
            };
            let h = HeaderRepr::parse(&view);
            let len = usize::from(h.length);
            if len < HEADER_LEN {
                // Framing is lost: report and hang up.
                let e = WireError::BadRequest(
                    err::BRC_BAD_LEN,
                    format!("message length {len} below 8"),
                );
                warn!(peer = %self.peer, error = %e, "closing OpenFlow connection");
                self.send(&Message::error_for(&e, &buf).emit(h.xid))?;
                return Ok(());
            }
            buf.resize(len, 0);
            if let Some(body) = buf.get_mut(HEADER_LEN..) {
                if read_full(&mut self.reader, body, patience)? != Filled::Full {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            if let Next::Close = self.handle(&h, &buf)? {
                return Ok(());
            }
        }
    }

    /// What an idle connection does at `now` (see the module
    /// documentation): whether to hang up.
    fn idle(
        &mut self,
        now: Instant,
        started: Instant,
        heard: bool,
        last_heard: Instant,
        probe_sent: &mut Option<Instant>,
    ) -> io::Result<bool> {
        if self.outbox.is_failed() {
            return Ok(true);
        }
        let expired = self.bundles.expire(now);
        for m in expired {
            self.send(&m)?;
        }
        let Some(probe) = self.probe.get() else {
            return Ok(false);
        };
        if self.service && !heard && now.saturating_duration_since(started) >= self.hello_timeout {
            LimitStats::hit(&self.stats.hello_timeouts);
            warn!(peer = %self.peer, timeout = ?self.hello_timeout, "OpenFlow peer sent nothing; disconnecting");
            return Ok(true);
        }
        match *probe_sent {
            Some(at) if now.saturating_duration_since(at) >= probe => {
                LimitStats::hit(&self.stats.probe_timeouts);
                warn!(peer = %self.peer, "no answer to the inactivity probe; disconnecting");
                Ok(true)
            }
            Some(_) => Ok(false),
            None if now.saturating_duration_since(last_heard) >= probe => {
                debug!(peer = %self.peer, "idle; sending an inactivity probe");
                self.send(&Message::EchoRequest(Vec::new()).emit(PROBE_XID))?;
                *probe_sent = Some(now);
                Ok(false)
            }
            None => Ok(false),
        }
    }

    /// The id this connection's flow monitors are kept under (none before
    /// HELLO).
    fn monitor_id(&self) -> Option<u64> {
        self.subscription.as_ref().map(|s| s.id())
    }

    /// This connection as the maker of the change request `xid` makes,
    /// for its own flow monitors (see `monitor.rs`).
    fn origin(&self, xid: u32) -> Option<(u64, u32)> {
        self.monitor_id().map(|conn| (conn, xid))
    }

    /// Sends messages encoded by the 1.3 codec, relabelled with the
    /// connection's version.
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        // HELLO goes first whatever happens: a peer whose first bytes are
        // not a message (bad framing) gets an error after it.
        if !self.hello_sent {
            self.send_hello(OFP_VERSION)?;
        }
        if bytes.get(1) == Some(&msg_type::ERROR) {
            ControlCounters::bump(&self.bridge.counters().errors_sent, 1);
        }
        if self.version == OFP_VERSION {
            return self.outbox.send(bytes);
        }
        let mut out = bytes.to_vec();
        versions::relabel(&mut out, self.version);
        self.outbox.send(&out)
    }

    fn send_hello(&mut self, version: u8) -> io::Result<()> {
        self.hello_sent = true;
        let mut hello = Message::Hello {
            bitmap: Some(1 << version),
        }
        .emit(0);
        versions::relabel(&mut hello, version);
        self.outbox.send(&hello)
    }

    fn send_error(&mut self, e: &WireError, xid: u32, offending: &[u8]) -> io::Result<()> {
        debug!(peer = %self.peer, error = %e, "rejecting OpenFlow message");
        self.send(&Message::error_for(e, offending).emit(xid))
    }

    /// Sends an OFPT_ERROR with an explicit (type, code).
    fn send_ofp_error(
        &mut self,
        (ty, code): (u16, u16),
        xid: u32,
        offending: &[u8],
    ) -> io::Result<()> {
        let data = crate::wire::message::error_data(offending);
        self.send(&Message::Error { ty, code, data }.emit(xid))
    }

    fn handle(&mut self, h: &HeaderRepr, raw: &[u8]) -> io::Result<Next> {
        let body = &raw[HEADER_LEN..];
        if !self.hello_sent {
            // The peer spoke first: answer its HELLO with the version it
            // allows, or anything else (HELLO missing) as 1.3.
            let chosen = match (h.msg_type, Message::parse(h, body)) {
                (msg_type::HELLO, Ok(Message::Hello { bitmap })) => {
                    versions::negotiate(h.version, bitmap)
                }
                _ => None,
            };
            self.version = chosen.unwrap_or(OFP_VERSION);
            self.send_hello(self.version)?;
        }
        if h.msg_type == msg_type::HELLO {
            return match Message::parse(h, body) {
                Ok(Message::Hello { bitmap })
                    if versions::negotiate(h.version, bitmap) == Some(self.version) =>
                {
                    // Every version subscribes; the notifier encodes for
                    // each connection's version. 1.4 on start from their
                    // version's defaults (OVS's).
                    if self.subscription.is_none() {
                        if self.version != OFP_VERSION {
                            *self.async_config.lock() =
                                crate::wire::async14::AsyncConfig14::later_default().base;
                        }
                        self.subscription = Some(self.bridge.notifier().subscribe(
                            self.outbox.clone(),
                            &self.role,
                            self.async_config.clone(),
                            self.service.then(|| self.miss_send_len.clone()),
                            self.version,
                            self.packet_in_limit.map(|l| (l, &self.packet_in_stats)),
                        ));
                    }
                    Ok(Next::Continue)
                }
                Ok(_) => {
                    let e = (err::HELLO_FAILED, err::HFC_INCOMPATIBLE);
                    self.send_ofp_error(e, h.xid, raw)?;
                    Ok(Next::Close)
                }
                Err(e) => {
                    self.send_error(&e, h.xid, raw)?;
                    Ok(Next::Close)
                }
            };
        }
        if h.version != self.version {
            let e =
                WireError::BadRequest(err::BRC_BAD_VERSION, format!("version {:#x}", h.version));
            self.send_error(&e, h.xid, raw)?;
            return Ok(Next::Continue);
        }
        if self.role.refuses(h.version, h.msg_type, body.len()) {
            self.send_ofp_error((err::BAD_REQUEST, err::BRC_IS_SLAVE), h.xid, raw)?;
            return Ok(Next::Continue);
        }
        let mut h = *h;
        if self.version != OFP_VERSION {
            match self.serve_later(&h, body, raw)? {
                Some(next) => return Ok(next),
                None => h.version = OFP_VERSION,
            }
        }
        match Message::parse(&h, body) {
            Ok(m) => self.dispatch(h.xid, m, raw)?,
            Err(e) => self.send_error(&e, h.xid, raw)?,
        }
        Ok(Next::Continue)
    }

    /// Serves a message a later version's own decoder read, or reports
    /// why it could not.
    fn serve_decoded(
        &mut self,
        xid: u32,
        decoded: Result<Message, WireError>,
        raw: &[u8],
    ) -> io::Result<Next> {
        match decoded {
            Ok(m) => self.dispatch(xid, m, raw)?,
            Err(e) => self.send_error(&e, xid, raw)?,
        }
        Ok(Next::Continue)
    }

    fn dispatch(&mut self, xid: u32, m: Message, raw: &[u8]) -> io::Result<()> {
        match m {
            Message::EchoRequest(data) => self.send(&Message::EchoReply(data).emit(xid)),
            Message::EchoReply(_) | Message::Hello { .. } => Ok(()),
            Message::Error { ty, code, .. } => {
                debug!(peer = %self.peer, ty, code, "peer sent an error");
                Ok(())
            }
            Message::ExperimenterError {
                exp_type,
                experimenter,
                ..
            } => {
                debug!(peer = %self.peer, exp_type, experimenter, "peer sent an experimenter error");
                Ok(())
            }
            Message::FeaturesRequest => {
                let f = Features {
                    datapath_id: self.bridge.datapath().datapath_id(),
                    n_buffers: 0,
                    n_tables: N_TABLES,
                    capabilities: capabilities::FLOW_STATS
                        | capabilities::TABLE_STATS
                        | capabilities::PORT_STATS
                        | capabilities::GROUP_STATS,
                };
                self.send(&Message::FeaturesReply(f).emit(xid))
            }
            Message::GetConfigRequest => {
                let c = SwitchConfig {
                    flags: self.bridge.frag_flags(),
                    miss_send_len: self.miss_send_len.load(Ordering::Relaxed),
                };
                self.send(&Message::GetConfigReply(c).emit(xid))
            }
            Message::SetConfig(c) => {
                if c.flags & !FRAG_MASK != 0 {
                    return self.send_ofp_error((err::SWITCH_CONFIG_FAILED, 0), xid, raw);
                }
                self.bridge.set_frag_flags(c.flags);
                self.miss_send_len.store(c.miss_send_len, Ordering::Relaxed);
                Ok(())
            }
            Message::RoleRequest(m) => match self.role.request(m.role, m.generation_id) {
                Ok((role, generation_id)) => self.send(
                    &Message::RoleReply(RoleMsg {
                        role,
                        generation_id,
                    })
                    .emit(xid),
                ),
                Err(e) => self.send_ofp_error(e, xid, raw),
            },
            Message::GetAsyncRequest => {
                let c = *self.async_config.lock();
                self.send(&Message::GetAsyncReply(c).emit(xid))
            }
            Message::SetAsync(c) => {
                *self.async_config.lock() = c;
                Ok(())
            }
            // A slave controller may read but not change the switch.
            Message::FlowMod(_)
            | Message::GroupMod(_)
            | Message::PortMod(_)
            | Message::TableMod(_)
            | Message::MeterMod(_)
            | Message::PacketOut(_)
            | Message::Experimenter { .. }
                if self.role.is_slave() =>
            {
                self.send_ofp_error((err::BAD_REQUEST, err::BRC_IS_SLAVE), xid, raw)
            }
            Message::PacketOut(po) => self.packet_out(xid, po, raw),
            Message::TableMod(tm) => match self.bridge.table_mod(&tm) {
                Ok(()) => Ok(()),
                Err(e) => self.send_ofp_error(e, xid, raw),
            },
            Message::MeterMod(mm) => match self.bridge.meter_mod(&mm, self.origin(xid)) {
                Ok(()) => Ok(()),
                Err(e) => {
                    debug!(peer = %self.peer, error = %e, "meter mod failed");
                    self.send_ofp_error(e.ofp_error(), xid, raw)
                }
            },
            Message::QueueGetConfigRequest(p) => {
                if p != port::ANY && !self.port_exists(p) {
                    return self.send_ofp_error(
                        (err::QUEUE_OP_FAILED, err::QOFC_BAD_PORT),
                        xid,
                        raw,
                    );
                }
                self.send(&Message::QueueGetConfigReply(p).emit(xid))
            }
            Message::FlowMod(fm) => match check_buffer(&fm) {
                Err(e) => self.send_error(&e, xid, raw),
                Ok(()) => match self.bridge.flow_mod(&fm, self.origin(xid)) {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        debug!(peer = %self.peer, error = %e, "flow mod failed");
                        self.send_ofp_error(e.ofp_error(), xid, raw)
                    }
                },
            },
            Message::GroupMod(gm) => match self.bridge.group_mod(&gm, self.origin(xid)) {
                Ok(()) => Ok(()),
                Err(e) => {
                    debug!(peer = %self.peer, error = %e, "group mod failed");
                    self.send_ofp_error(e.ofp_error(), xid, raw)
                }
            },
            Message::PortMod(pm) => {
                match self
                    .bridge
                    .datapath()
                    .port_mod(pm.port_no, pm.hw_addr, pm.config, pm.mask)
                {
                    Ok(()) => {
                        let changed = self
                            .bridge
                            .datapath()
                            .ports()
                            .into_iter()
                            .find(|p| p.port_no == pm.port_no);
                        if let Some(p) = changed {
                            let source = self.subscription.as_ref().map(Subscription::id);
                            self.bridge
                                .notifier()
                                .port_status_from(port_reason::MODIFY, p, source);
                        }
                        Ok(())
                    }
                    Err(e) => self.send_ofp_error(e.ofp_error(), xid, raw),
                }
            }
            Message::BarrierRequest => {
                self.bridge.barrier();
                self.send(&Message::BarrierReply.emit(xid))
            }
            Message::MultipartRequest(req) => self.multipart(xid, req, raw),
            Message::Experimenter {
                experimenter,
                exp_type,
                data,
            } => {
                if experimenter == crate::wire::NX_VENDOR_ID
                    && exp_type == crate::wire::NXT_SET_PACKET_IN_FORMAT
                {
                    return self.set_packet_in_format(xid, &data, raw);
                }
                if experimenter == crate::wire::NX_VENDOR_ID
                    && exp_type == crate::wire::NXT_TLV_TABLE_REQUEST
                {
                    // xbr maps no Geneve options onto `tun_metadata`
                    // fields: no option space, no fields, no mappings
                    // (`nx_tlv_table_reply`: max_option_space u32,
                    // max_fields u16, 10 bytes reserved).
                    let reply = Message::Experimenter {
                        experimenter,
                        exp_type: crate::wire::NXT_TLV_TABLE_REPLY,
                        data: vec![0; 16],
                    };
                    return self.send(&reply.emit(xid));
                }
                if experimenter != ONF_VENDOR_ID {
                    let e = WireError::BadRequest(
                        err::BRC_BAD_EXPERIMENTER,
                        format!("experimenter {experimenter:#x}"),
                    );
                    return self.send_error(&e, xid, raw);
                }
                if exp_type == crate::wire::monitor::ONF_FLOW_MONITOR {
                    return self.flow_monitor_cancel(xid, &data, raw);
                }
                let to = CommitTo {
                    conn: self.monitor_id(),
                    bridge: &self.bridge,
                };
                let out = self.bundles.handle(to, xid, exp_type, &data, raw);
                for m in out {
                    self.send(&m)?;
                }
                Ok(())
            }
            // Switch-to-controller messages make no sense in this direction.
            Message::FeaturesReply(_)
            | Message::GetConfigReply(_)
            | Message::BarrierReply
            | Message::RoleReply(_)
            | Message::GetAsyncReply(_)
            | Message::QueueGetConfigReply(_)
            | Message::FlowRemoved(_)
            | Message::PacketIn(_)
            | Message::PortStatus(_) => {
                let e = WireError::BadRequest(err::BRC_BAD_TYPE, "reply sent to a switch".into());
                self.send_error(&e, xid, raw)
            }
        }
    }

    fn packet_out(&mut self, xid: u32, po: PacketOut, raw: &[u8]) -> io::Result<()> {
        // xbr never buffers packets, so no buffer id can be valid.
        if po.buffer_id != NO_BUFFER {
            let e = (err::BAD_REQUEST, err::BRC_BUFFER_UNKNOWN);
            return self.send_ofp_error(e, xid, raw);
        }
        let in_port_ok = matches!(po.in_port, port::CONTROLLER | port::LOCAL | port::ANY)
            || self.port_exists(po.in_port);
        if !in_port_ok {
            return self.send_ofp_error((err::BAD_REQUEST, err::BRC_BAD_PORT), xid, raw);
        }
        match self
            .bridge
            .datapath()
            .packet_out(po.in_port, po.metadata, po.actions, po.data)
        {
            Ok(()) => Ok(()),
            Err(e) => {
                debug!(peer = %self.peer, error = %e, "packet out refused");
                self.send_ofp_error(e.ofp_error(), xid, raw)
            }
        }
    }

    /// Nicira's SET_PACKET_IN_FORMAT (`ovs-ofctl monitor -P standard`):
    /// xbr sends OpenFlow's own PACKET_IN only, so it takes that format
    /// and refuses Nicira's two (OFPBRC_EPERM, OVS's code for a format it
    /// does not know); ovs-ofctl then falls back to the standard one.
    fn set_packet_in_format(&mut self, xid: u32, data: &[u8], raw: &[u8]) -> io::Result<()> {
        match data {
            [0, 0, 0, 0] => Ok(()),
            _ => {
                let e = WireError::BadRequest(
                    err::BRC_EPERM,
                    "only the standard packet-in format is supported".into(),
                );
                self.send_error(&e, xid, raw)
            }
        }
    }

    fn port_exists(&self, port_no: u32) -> bool {
        self.bridge
            .datapath()
            .ports()
            .iter()
            .any(|p| p.port_no == port_no)
    }
}

/// xbr has no packet buffers (n_buffers 0).
fn check_buffer(fm: &FlowMod) -> Result<(), WireError> {
    if fm.buffer_id != NO_BUFFER {
        return Err(WireError::BadRequest(
            err::BRC_BUFFER_UNKNOWN,
            format!("buffer {:#x} does not exist", fm.buffer_id),
        ));
    }
    Ok(())
}
