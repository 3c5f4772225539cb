//! The OpenFlow side's view of the datapath (`ofproto::Datapath`): ports,
//! their counters and PORT_MOD, change lists and barriers, PACKET_OUT,
//! statistics collection and the fail mode, over [`DpShared`].

use super::{port_config, DpShared, PacketOutRequest, MAX_PACKET_OUT, SYNC_TIMEOUT};
use flowtable::tables::Change;
use flowtable::Action;
use ofproto::{Datapath, PacketOutError, PortCounters, PortInfo, PortModError};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

impl Datapath for DpShared {
    fn datapath_id(&self) -> u64 {
        self.datapath_id
    }

    fn ports(&self) -> Vec<PortInfo> {
        self.ports.read().iter().map(|p| p.info()).collect()
    }

    fn port_stats(&self, port_no: u32) -> Vec<PortCounters> {
        self.ports
            .read()
            .iter()
            .filter(|p| port_no == flowtable::action::port::ANY || p.ofport == port_no)
            .map(|p| {
                let s = &p.stats;
                PortCounters {
                    port_no: p.ofport,
                    rx_packets: s.rx_packets.load(Relaxed),
                    tx_packets: s.tx_packets(),
                    rx_bytes: s.rx_bytes.load(Relaxed),
                    tx_bytes: s.tx_bytes(),
                    rx_dropped: s.rx_dropped.load(Relaxed),
                    tx_dropped: s.tx_dropped(),
                    rx_errors: s.rx_errors.load(Relaxed),
                    tx_errors: s.tx_errors.load(Relaxed),
                    duration: p.created.elapsed(),
                }
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
        let port = self.port(port_no).ok_or(PortModError::BadPort)?;
        if port.hw_addr != hw_addr {
            return Err(PortModError::BadHwAddr);
        }
        if mask & !port_config::ALL != 0 {
            return Err(PortModError::Failed(format!(
                "port config bits {:#x} are not supported",
                mask & !port_config::ALL
            )));
        }
        let old = port.config.load(Relaxed);
        port.config.store((old & !mask) | (config & mask), Relaxed);
        // After the store (XdpGen publishes with Release), before the
        // reply: no XDP cache entry made under the old config is used
        // once the controller hears back.
        self.invalidate_xdp_cache();
        Ok(())
    }

    fn publish(&self, changes: Vec<Change>) -> u64 {
        let mut s = self.seq.lock();
        s.published += 1;
        let seq = s.published;
        if changes.is_empty() {
            // Nothing for the packet threads; count it as applied by those
            // that applied all before, so a later barrier does not wait.
            for a in &mut s.applied {
                if *a + 1 == seq {
                    *a = seq;
                }
            }
        }
        let changes: Arc<[Change]> = changes.into();
        // Sending under the lock keeps the channels in sequence order.
        for (i, e) in self.engines.iter().enumerate() {
            if e.changes.send((seq, changes.clone())).is_err() {
                tracing::error!("packet thread {i} is gone; pipeline change {seq} not applied");
            }
        }
        drop(s);
        self.wake();
        seq
    }

    fn sync(&self, seq: u64) {
        let deadline = Instant::now() + SYNC_TIMEOUT;
        let mut s = self.seq.lock();
        while s.applied() < seq {
            if self.applied.wait_until(&mut s, deadline).timed_out() {
                tracing::error!(
                    "barrier: packet threads have not applied change {seq} after {:?} (at {:?})",
                    SYNC_TIMEOUT,
                    s.applied
                );
                return;
            }
        }
    }

    fn packet_out(
        &self,
        in_port: u32,
        metadata: Vec<(flowtable::Field, u64)>,
        actions: Vec<Action>,
        data: Vec<u8>,
    ) -> Result<(), PacketOutError> {
        if data.len() > MAX_PACKET_OUT {
            return Err(PacketOutError::TooBig(data.len()));
        }
        self.packet_outs
            .try_send(PacketOutRequest {
                in_port,
                metadata,
                actions,
                data,
            })
            .map_err(|_| PacketOutError::Busy)?;
        // Only thread 0 runs them.
        self.wake_engine(0);
        Ok(())
    }

    fn collect_stats(&self) {
        // The XDP flow cache's hits and the kernel's drops before the
        // sockets are kept outside the atomics (the translation cache's
        // lag is one batch).
        self.collect_now();
    }

    fn set_fail_open(&self, on: bool) {
        if self.fail_open.swap(on, Relaxed) != on {
            self.invalidate_xdp_cache();
            tracing::info!(
                fail_open = on,
                "fail mode standalone: forwarding by NORMAL {}",
                if on { "on" } else { "off" }
            );
            self.wake();
        }
    }
}
