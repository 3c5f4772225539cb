//! Opening a `type=vxlan` port on the real system: the uplink's XDP
//! program and AF_XDP socket (on the bridge's shared UMEM) and the
//! neighbour resolver thread. Closing is `Port::close`, which tears the
//! uplink down like any AF_XDP port; the resolver ends with the port.

use super::neigh::{self, ResolverConfig};
use super::{VxlanParams, VxlanPort};
use crate::config::PortSpec;
use crate::control::PortMeta;
use crate::fastpath::cache::CacheMaps;
use crate::fastpath::loader::{XdpModeRequest, XdpProgram};
use crate::netdev::{self, NetdevError};
use crate::ports::{open_xsk, PortError, XskPort};
use crate::xsk::Umem;
use std::sync::Arc;

/// Opens the VXLAN port of `spec` (ofport assigned), or nothing. With
/// `cache` (the XDP flow cache is on), the uplink's program shares the
/// bridge's cache maps: it decapsulates and forwards frames of cached
/// flows itself, and with `xdp_redirect=on` entries may encapsulate and
/// redirect to the uplink.
pub(crate) fn open(
    spec: &PortSpec,
    umem: &Arc<Umem>,
    cache: Option<&CacheMaps>,
) -> Result<(Arc<PortMeta>, VxlanPort<XskPort>), PortError> {
    let name = spec.name.clone();
    let ofport = spec.ofport.unwrap_or(0);
    // The parser sets `vxlan` for every type=vxlan spec; a spec built in
    // code without it is refused, not guessed at.
    let Some(v) = &spec.vxlan else {
        return Err(PortError::NoVxlanSettings(name));
    };
    let link = netdev::link_by_name(&v.uplink).map_err(|source| match source {
        NetdevError::NotFound(_) => PortError::NoSuchUplink {
            port: name.clone(),
            uplink: v.uplink.clone(),
        },
        source => PortError::Netdev {
            name: v.uplink.clone(),
            source,
        },
    })?;
    let prog = XdpProgram::attach_vxlan(
        link.ifindex,
        XdpModeRequest::Auto,
        v.local_ip,
        v.dst_port,
        cache,
    )
    .map_err(|source| PortError::Xdp {
        name: v.uplink.clone(),
        source,
    })?;
    let mut uplink = open_xsk(&v.uplink, &link, prog, umem)?;
    crate::ports::set_redirect(&mut uplink, &v.uplink, &link, cache, spec.xdp_redirect)?;
    let resolver = ResolverConfig {
        uplink_ifindex: link.ifindex,
        uplink_mac: link.mac.unwrap_or_default(),
        local_ip: v.local_ip,
        dst_port: v.dst_port,
    };
    // The resolver thread ends when the port (its reader) drops.
    let reader = match neigh::spawn(resolver) {
        Ok((reader, _handle)) => reader,
        Err(source) => {
            // Nothing lent to the kernel yet (see `open_xsk`): just drop.
            drop(uplink);
            return Err(PortError::Resolver { port: name, source });
        }
    };
    let params = VxlanParams {
        local_ip: u32::from(v.local_ip),
        dst_port: v.dst_port,
        mtu: link.mtu,
    };
    tracing::info!(
        port = %name,
        ofport,
        uplink = %v.uplink,
        local_ip = %v.local_ip,
        dst_port = v.dst_port,
        mtu = link.mtu,
        "VXLAN port attached"
    );
    // As OVS shows a flow-based VXLAN port's configuration.
    let meta = PortMeta::new(ofport, name, [0; 6])
        .with_kind(format!(
            "vxlan: dst_port={}, key=flow, local_ip={}, remote_ip=flow",
            v.dst_port, v.local_ip
        ))
        .with_redirect(uplink.redirect.clone());
    Ok((Arc::new(meta), VxlanPort::new(uplink, params, reader)))
}
