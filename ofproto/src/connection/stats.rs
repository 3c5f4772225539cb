//! Multipart (statistics) requests of one connection.

use super::Connection;
use crate::versions::OFP15_VERSION;
use crate::wire::millisecond_duration;
use crate::wire::multipart::{self, pack_replies, FlowStatsEntry, MultipartRequest};
use crate::wire::{err, features, meter, stats15, table_features, WireError};
use flowtable::action::{group as group_no, port};
use flowtable::{FlowFilter, Meter};
use std::io::{self, Read};
use std::sync::Arc;

impl<R: Read> Connection<R> {
    pub(super) fn multipart(
        &mut self,
        xid: u32,
        req: MultipartRequest,
        raw: &[u8],
    ) -> io::Result<()> {
        let ty = req.mp_type();
        // Counters some of which the packet thread holds (XDP flow cache
        // hits, the kernel's drops before the sockets): collected first.
        // Descriptions and features need no round trip to it.
        if matches!(
            req,
            MultipartRequest::Flow(_)
                | MultipartRequest::Aggregate(_)
                | MultipartRequest::Table
                | MultipartRequest::PortStats(_)
                | MultipartRequest::GroupStats(_)
                | MultipartRequest::Meter(_)
                | MultipartRequest::Queue(..)
        ) {
            self.bridge.datapath().collect_stats();
        }
        let entries: Vec<Vec<u8>> = match req {
            MultipartRequest::Desc => vec![multipart::desc_entry(
                "xbr",
                "xbr userspace switch",
                env!("CARGO_PKG_VERSION"),
                "None",
                "None",
            )],
            MultipartRequest::Flow(filter) => self.flow_stats(&filter),
            MultipartRequest::Aggregate(filter) => {
                let rules = self.bridge.with_tables(|t| t.flows(&filter));
                let (p, b) = rules.iter().fold((0u64, 0u64), |(p, b), r| {
                    let (rp, rb) = r.stats.read();
                    (p.wrapping_add(rp), b.wrapping_add(rb))
                });
                let n = u32::try_from(rules.len()).unwrap_or(u32::MAX);
                if self.version == OFP15_VERSION {
                    vec![stats15::aggregate_entry(p, b, n)]
                } else {
                    vec![multipart::aggregate_entry(p, b, n)]
                }
            }
            MultipartRequest::Table => self
                .bridge
                .with_tables(|t| t.table_stats())
                .iter()
                .map(multipart::table_stats_entry)
                .collect(),
            MultipartRequest::PortStats(p) => {
                let mut stats = self.bridge.datapath().port_stats(p);
                for s in &mut stats {
                    s.duration = millisecond_duration(s.duration);
                }
                if stats.is_empty() && p != port::ANY {
                    let e = WireError::BadRequest(err::BRC_BAD_PORT, format!("no port {p}"));
                    return self.send_error(&e, xid, raw);
                }
                if self.version == crate::wire::OFP_VERSION {
                    stats.iter().map(multipart::port_stats_entry).collect()
                } else {
                    stats
                        .iter()
                        .map(crate::wire::port14::port_stats_entry)
                        .collect()
                }
            }
            MultipartRequest::PortDesc => self.port_desc_entries(port::ANY),
            MultipartRequest::GroupDesc => self
                .bridge
                .with_tables(|t| t.groups())
                .iter()
                .map(|g| multipart::group_desc_entry(g.id, g.group_type, &g.buckets))
                .collect(),
            MultipartRequest::GroupStats(id) => self.group_stats(id),
            MultipartRequest::TableFeatures => table_features::entries(),
            MultipartRequest::GroupFeatures => vec![features::group_features_entry()],
            MultipartRequest::MeterFeatures => vec![meter::meter_features_entry()],
            MultipartRequest::Meter(id) | MultipartRequest::MeterConfig(id) => {
                let stats = matches!(req, MultipartRequest::Meter(_));
                match self.meter_entries(id, stats) {
                    Some(entries) => entries,
                    // As OVS answers for one meter that does not exist.
                    None => {
                        return self.send_ofp_error(
                            (err::METER_MOD_FAILED, err::MMFC_UNKNOWN_METER),
                            xid,
                            raw,
                        )
                    }
                }
            }
            // Its replies go through the monitors' queue (`monitor.rs`).
            MultipartRequest::FlowMonitor(reqs) => return self.flow_monitor(xid, reqs, raw),
            MultipartRequest::Queue(p, q) => {
                if let Err(e) = self.check_queue(p, q) {
                    return self.send_ofp_error(e, xid, raw);
                }
                Vec::new()
            }
        };
        for m in pack_replies(xid, ty, entries) {
            self.send(&m)?;
        }
        Ok(())
    }

    /// Sets up, changes or deletes flow monitors (see `monitor.rs`); the
    /// reply with the initial flows goes out through the monitors' queue,
    /// ahead of any later update.
    pub(super) fn flow_monitor(
        &mut self,
        xid: u32,
        reqs: Vec<crate::wire::monitor::MonitorRequest>,
        raw: &[u8],
    ) -> io::Result<()> {
        let Some(conn) = self.monitor_id() else {
            let e = WireError::BadRequest(err::BRC_EPERM, "no HELLO yet".into());
            return self.send_error(&e, xid, raw);
        };
        match self
            .bridge
            .monitor_request(conn, &self.outbox, self.version, xid, reqs)
        {
            Ok(()) => Ok(()),
            Err(e) => self.send_error(&e, xid, raw),
        }
    }

    /// OpenFlow 1.3's cancel of a flow monitor (an ONF experimenter
    /// message).
    pub(super) fn flow_monitor_cancel(
        &mut self,
        xid: u32,
        data: &[u8],
        raw: &[u8],
    ) -> io::Result<()> {
        let cancelled = crate::wire::monitor::parse_onf13_cancel(data).and_then(|id| {
            match self.subscription.as_ref() {
                Some(s) => self.bridge.monitor_cancel(s.id(), self.version, id),
                None => Err(WireError::BadRequest(err::BRC_EPERM, "no HELLO yet".into())),
            }
        });
        match cancelled {
            Ok(()) => Ok(()),
            Err(e) => self.send_error(&e, xid, raw),
        }
    }

    /// Whether `queue` of `port` (either may be ALL / ANY) names queues
    /// the switch has: ports have only their default queue, which is not
    /// listed, so only "every queue" is, and answered with none.
    fn check_queue(&self, port: u32, queue: u32) -> Result<(), (u16, u16)> {
        if port != port::ANY && !self.port_exists(port) {
            return Err((err::QUEUE_OP_FAILED, err::QOFC_BAD_PORT));
        }
        if queue != features::QUEUE_ALL {
            return Err((err::QUEUE_OP_FAILED, err::QOFC_BAD_QUEUE));
        }
        Ok(())
    }

    /// OpenFlow 1.4's QUEUE_DESC request (no queue is listed, see
    /// `check_queue`).
    pub(super) fn queue_desc(
        &mut self,
        xid: u32,
        port_no: u32,
        queue_id: u32,
        raw: &[u8],
    ) -> io::Result<()> {
        if let Err(e) = self.check_queue(port_no, queue_id) {
            return self.send_ofp_error(e, xid, raw);
        }
        for m in pack_replies(xid, multipart::mp_type::QUEUE_DESC, Vec::new()) {
            self.send(&m)?;
        }
        Ok(())
    }

    /// OpenFlow 1.4's TABLE_DESC request: every table's eviction and
    /// vacancy settings.
    pub(super) fn table_desc(&mut self, xid: u32) -> io::Result<()> {
        let entries: Vec<Vec<u8>> = self
            .bridge
            .table_descs()
            .iter()
            .map(|(id, s, n)| crate::wire::table14::table_desc_entry(*id, s, *n))
            .collect();
        for m in pack_replies(xid, multipart::mp_type::TABLE_DESC, entries) {
            self.send(&m)?;
        }
        Ok(())
    }

    /// OpenFlow 1.5's PORT_DESC request, which names a port (or ANY).
    pub(super) fn port_desc_v15(&mut self, xid: u32, port_no: u32) -> io::Result<()> {
        let entries = self.port_desc_entries(port_no);
        for m in pack_replies(xid, multipart::mp_type::PORT_DESC, entries) {
            self.send(&m)?;
        }
        Ok(())
    }

    /// OpenFlow 1.5's GROUP_DESC request, for one group or ALL (a group
    /// that does not exist gets an empty reply, as from OVS).
    pub(super) fn group_desc_v15(&mut self, xid: u32, group_id: u32) -> io::Result<()> {
        let entries: Vec<Vec<u8>> = self
            .bridge
            .with_tables(|t| t.groups())
            .iter()
            .filter(|g| group_id == group_no::ALL || g.id == group_id)
            .map(|g| {
                crate::wire::group15::group_desc_entry(
                    g.id,
                    g.group_type,
                    &g.buckets,
                    g.selection.as_ref(),
                )
            })
            .collect();
        for m in pack_replies(xid, multipart::mp_type::GROUP_DESC, entries) {
            self.send(&m)?;
        }
        Ok(())
    }

    /// Ports in the connection's version's encoding.
    fn port_desc_entries(&self, port_no: u32) -> Vec<Vec<u8>> {
        let encode = if self.version == crate::wire::OFP_VERSION {
            multipart::port_desc_entry
        } else {
            multipart::port_desc_entry_v14
        };
        self.bridge
            .datapath()
            .ports()
            .iter()
            .filter(|p| port_no == port::ANY || p.port_no == port_no)
            .map(encode)
            .collect()
    }

    /// METER stats (`stats`) or METER_CONFIG entries of meter `id` or
    /// of every meter (OFPM_ALL); `None` for a single unknown meter.
    fn meter_entries(&self, id: u32, stats: bool) -> Option<Vec<Vec<u8>>> {
        let meters: Vec<(Arc<Meter>, usize)> = self.bridge.with_tables(|t| {
            let pick = |m: Arc<Meter>| {
                let n = t.meter_flow_count(m.id);
                (m, n)
            };
            if id == features::METER_ALL {
                Some(t.meters().into_iter().map(pick).collect())
            } else {
                t.meter(id).map(|m| vec![pick(m)])
            }
        })?;
        let entry = |(m, flows): &(Arc<Meter>, usize)| {
            if stats {
                let flows = u32::try_from(*flows).unwrap_or(u32::MAX);
                meter::meter_stats_entry(m, flows, m.stats.installed.elapsed())
            } else {
                meter::meter_config_entry(m)
            }
        };
        Some(meters.iter().map(entry).collect())
    }

    fn flow_stats(&self, filter: &FlowFilter) -> Vec<Vec<u8>> {
        let rules = self.bridge.with_tables(|t| t.flows(filter));
        rules
            .iter()
            .map(|r| {
                let (packet_count, byte_count) = r.stats.read();
                let mut out = Vec::with_capacity(128);
                FlowStatsEntry {
                    table_id: r.table_id,
                    duration: millisecond_duration(r.installed.elapsed()),
                    priority: r.priority,
                    idle_timeout: r.idle_timeout,
                    hard_timeout: r.hard_timeout,
                    flags: r.flags,
                    cookie: r.cookie,
                    packet_count,
                    byte_count,
                    matching: r.matching,
                    instructions: r.instructions.clone(),
                }
                .emit_for(self.version, &mut out);
                out
            })
            .collect()
    }

    /// Group counters. Per-bucket counters and group age are not tracked
    /// by the pipeline, so bucket stats are omitted and the duration is 0.
    fn group_stats(&self, id: u32) -> Vec<Vec<u8>> {
        self.bridge.with_tables(|t| {
            t.groups()
                .iter()
                .filter(|g| id == group_no::ALL || id == group_no::ANY || g.id == id)
                .map(|g| {
                    let users = t.flows(&FlowFilter {
                        out_group: g.id,
                        ..FlowFilter::default()
                    });
                    let (p, b) = g.stats.read();
                    let refs = u32::try_from(users.len()).unwrap_or(u32::MAX);
                    let buckets: Vec<(u64, u64)> =
                        g.bucket_stats.iter().map(|s| s.read()).collect();
                    multipart::group_stats_entry(g.id, refs, p, b, g.created.elapsed(), &buckets)
                })
                .collect()
        })
    }
}
