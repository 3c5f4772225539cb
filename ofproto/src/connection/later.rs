//! How a connection that negotiated OpenFlow 1.4 or 1.5 serves each
//! message: through the 1.3 codec when the encoding did not change, else
//! through the later version's own decoder and reply (see
//! `crate::versions` for which is which).

use super::{Connection, Next};
use crate::bundle::CommitTo;
use crate::versions::{self, Route};
use crate::wire::async14::AsyncConfig14;
use crate::wire::header::{msg_type, HeaderRepr};
use crate::wire::Message;
use std::io::{self, Read};

impl<R: Read> Connection<R> {
    /// The connection's whole asynchronous configuration as 1.4 states it.
    fn async_config14(&self) -> AsyncConfig14 {
        let [role_status_mask, table_status_mask, requestforward_mask] = self.async_added;
        AsyncConfig14 {
            base: *self.async_config.lock(),
            role_status_mask,
            table_status_mask,
            requestforward_mask,
        }
    }

    /// Serves a message of a 1.4/1.5 connection whose encoding is not
    /// 1.3's; `None` for one the 1.3 codec serves (the caller relabels
    /// its header).
    pub(super) fn serve_later(
        &mut self,
        h: &HeaderRepr,
        body: &[u8],
        raw: &[u8],
    ) -> io::Result<Option<Next>> {
        match versions::route(self.version, h.msg_type, body) {
            Route::AsOf13 => Ok(None),
            Route::Bundle { control } => {
                let to = CommitTo {
                    conn: self.monitor_id(),
                    bridge: &self.bridge,
                };
                let out = self
                    .bundles
                    .handle_standard(to, h.xid, control, body, raw, self.version);
                for m in out {
                    self.send(&m)?;
                }
                Ok(Some(Next::Continue))
            }
            Route::PortDesc15 { port_no } => {
                self.port_desc_v15(h.xid, port_no)?;
                Ok(Some(Next::Continue))
            }
            Route::FlowMod15 => {
                let dialect = crate::wire::action::Dialect::Of15;
                let m = crate::wire::mods::parse_flow_mod_in(body, dialect).map(Message::FlowMod);
                self.serve_decoded(h.xid, m, raw).map(Some)
            }
            Route::PacketOut15 => {
                let m = crate::wire::packet_io::PacketOut::parse_v15(body).map(Message::PacketOut);
                self.serve_decoded(h.xid, m, raw).map(Some)
            }
            Route::PortMod14 => {
                let m = crate::wire::port14::parse_port_mod(body).map(Message::PortMod);
                self.serve_decoded(h.xid, m, raw).map(Some)
            }
            Route::GroupMod15 => {
                let m = crate::wire::group15::parse_group_mod(body).map(Message::GroupMod);
                self.serve_decoded(h.xid, m, raw).map(Some)
            }
            Route::GroupDesc15 { group_id } => {
                self.group_desc_v15(h.xid, group_id)?;
                Ok(Some(Next::Continue))
            }
            Route::TableMod14 => {
                let m = crate::wire::table14::parse_table_mod(body).map(|(table_id, s)| {
                    Message::TableMod(crate::wire::features::TableMod {
                        table_id,
                        config: 0,
                        settings: Some(s),
                    })
                });
                self.serve_decoded(h.xid, m, raw).map(Some)
            }
            Route::FlowMonitor14 => {
                match crate::wire::monitor::parse_of14(body.get(8..).unwrap_or(&[])) {
                    Ok(reqs) => self.flow_monitor(h.xid, reqs, raw)?,
                    Err(e) => self.send_error(&e, h.xid, raw)?,
                }
                Ok(Some(Next::Continue))
            }
            Route::GetAsync14 => {
                let mut body = Vec::with_capacity(96);
                self.async_config14().emit(&mut body);
                let reply = HeaderRepr::framed(msg_type::GET_ASYNC_REPLY, h.xid, &body);
                self.send(&reply)?;
                Ok(Some(Next::Continue))
            }
            Route::SetAsync14 => {
                match self.async_config14().with_set_async(body) {
                    Ok(c) => {
                        *self.async_config.lock() = c.base;
                        self.async_added = [
                            c.role_status_mask,
                            c.table_status_mask,
                            c.requestforward_mask,
                        ];
                    }
                    Err(e) => self.send_error(&e, h.xid, raw)?,
                }
                Ok(Some(Next::Continue))
            }
            Route::TableDesc14 => {
                self.table_desc(h.xid)?;
                Ok(Some(Next::Continue))
            }
            Route::QueueDesc14 { port_no, queue_id } => {
                self.queue_desc(h.xid, port_no, queue_id, raw)?;
                Ok(Some(Next::Continue))
            }
            Route::Refuse(e) => {
                self.send_error(&e, h.xid, raw)?;
                Ok(Some(Next::Continue))
            }
        }
    }
}
