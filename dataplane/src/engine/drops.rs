//! What the engine drops, per reason.

use crate::engine::tunnel::TunnelDrops;
use flowtable::pipeline::DropReason;

/// Drop reasons the engine counts, beyond the pipeline's own.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineDrops {
    pub table_miss: u64,
    pub explicit: u64,
    pub unsupported: u64,
    pub resubmit_depth: u64,
    pub too_many_actions: u64,
    pub bad_output_port: u64,
    /// `dec_ttl` of a packet whose TTL was 0 or 1.
    pub invalid_ttl: u64,
    pub port_down: u64,
    pub no_frames: u64,
    pub tx_full: u64,
    /// Packets for the controllers dropped because their queue was full.
    pub upcall_queue_full: u64,
    /// PACKET_OUTs whose data did not fit a frame.
    pub packet_out_too_big: u64,
    /// Packets recirculated after conntrack more than
    /// [`MAX_RECIRC_DEPTH`](crate::engine::MAX_RECIRC_DEPTH) times.
    pub ct_recirc_depth: u64,
    /// Tunnel ports' drops, per reason.
    pub tunnel: TunnelDrops,
    /// Packets over a port's ingress policing rate or egress limit.
    pub qos_policed: u64,
    /// Packets a meter's DROP band dropped.
    pub meter: u64,
    /// New connections' first packets the XDP program dropped because
    /// conntrack had not yet read the reports of the ones before (it was
    /// a full ring behind; `conntrack/kernel_new.rs`).
    pub ct_new_overflow: u64,
    /// Packets received while OVSDB's `flow-restore-wait` was true.
    pub restore_wait: u64,
}

impl EngineDrops {
    /// Adds another packet thread's drops.
    pub fn merge(&mut self, o: &EngineDrops) {
        let EngineDrops {
            table_miss,
            explicit,
            unsupported,
            resubmit_depth,
            too_many_actions,
            bad_output_port,
            invalid_ttl,
            port_down,
            no_frames,
            tx_full,
            upcall_queue_full,
            packet_out_too_big,
            ct_recirc_depth,
            tunnel,
            qos_policed,
            meter,
            ct_new_overflow,
            restore_wait,
        } = o;
        self.table_miss += table_miss;
        self.explicit += explicit;
        self.unsupported += unsupported;
        self.resubmit_depth += resubmit_depth;
        self.too_many_actions += too_many_actions;
        self.bad_output_port += bad_output_port;
        self.invalid_ttl += invalid_ttl;
        self.port_down += port_down;
        self.no_frames += no_frames;
        self.tx_full += tx_full;
        self.upcall_queue_full += upcall_queue_full;
        self.packet_out_too_big += packet_out_too_big;
        self.ct_recirc_depth += ct_recirc_depth;
        self.tunnel.merge(tunnel);
        self.qos_policed += qos_policed;
        self.meter += meter;
        self.ct_new_overflow += ct_new_overflow;
        self.restore_wait += restore_wait;
    }

    pub(super) fn count(&mut self, reason: DropReason) {
        self.count_n(reason, 1);
    }

    pub(super) fn count_n(&mut self, reason: DropReason, n: u64) {
        match reason {
            DropReason::TableMiss => self.table_miss += n,
            DropReason::ExplicitDrop => self.explicit += n,
            DropReason::Unsupported(_) => self.unsupported += n,
            DropReason::ResubmitDepth => self.resubmit_depth += n,
            DropReason::TooManyActions => self.too_many_actions += n,
            DropReason::BadOutputPort => self.bad_output_port += n,
            DropReason::InvalidTtl => self.invalid_ttl += n,
        }
    }
}
