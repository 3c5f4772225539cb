//! Opening ports: the checks that need no attachment, then XDP and
//! AF_XDP for system ports (and tunnel uplinks), TAP devices or veth
//! pairs (served like system ports) for internal ones. See the `ports` module for the design; this half runs on
//! whatever thread opens a port (start-up, or a live add), never on the
//! packet thread.

use super::redirect::{watch, Readiness, RedirectMode, Why};
use super::*;
use crate::config::InternalBackend;
use crate::fastpath::cache::CacheMaps;
use crate::hostveth::{self, HostVeth, HostVethError};

/// Ports opened for a bridge, with the frame store they share.
pub struct OpenedPorts {
    pub frames: UmemFrames,
    /// The memory behind `frames`, for ports opened later.
    pub umem: Arc<Umem>,
    pub ports: Vec<(Arc<PortMeta>, Port)>,
}

/// Checks what can be checked about `spec` without attaching anything:
/// the name, that a system port's interface exists and an internal port's
/// does not (for the veth backend: or is a pair an earlier xbr left, which
/// opening replaces), the uplink of a tunnel, the MTU.
pub fn check_spec(spec: &PortSpec) -> Result<(), PortError> {
    netdev::validate_name(&spec.name).map_err(|source| PortError::Netdev {
        name: spec.name.clone(),
        source,
    })?;
    match (spec.port_type, netdev::link_by_name(&spec.name)) {
        (PortType::System, Err(NetdevError::NotFound(_))) => {
            return Err(PortError::NoSuchInterface(spec.name.clone()))
        }
        (PortType::System, Err(source)) => {
            return Err(PortError::Netdev {
                name: spec.name.clone(),
                source,
            })
        }
        (PortType::Internal, Ok(_)) if spec.internal_backend == InternalBackend::Veth => {
            match hostveth::existing(&spec.name) {
                Ok(hostveth::Existing::Leftover(_) | hostveth::Existing::Nothing) => {}
                Ok(hostveth::Existing::InUse) => {
                    return Err(PortError::HostVeth {
                        name: spec.name.clone(),
                        source: Box::new(HostVethError::InUse {
                            name: spec.name.clone(),
                            peer: hostveth::peer_name(&spec.name),
                        }),
                    })
                }
                Ok(hostveth::Existing::Foreign) => {
                    return Err(PortError::InterfaceExists(spec.name.clone()))
                }
                Err(source) => {
                    return Err(PortError::Netdev {
                        name: spec.name.clone(),
                        source,
                    })
                }
            }
        }
        (PortType::Internal, Ok(_)) => return Err(PortError::InterfaceExists(spec.name.clone())),
        _ => {}
    }
    if let Some(v) = &spec.vxlan {
        match netdev::link_by_name(&v.uplink) {
            Ok(_) => {}
            Err(NetdevError::NotFound(_)) => {
                return Err(PortError::NoSuchUplink {
                    port: spec.name.clone(),
                    uplink: v.uplink.clone(),
                })
            }
            Err(source) => {
                return Err(PortError::Netdev {
                    name: v.uplink.clone(),
                    source,
                })
            }
        }
    }
    if let Some(mtu) = spec.mtu_request {
        if !(68..=65535).contains(&mtu) {
            return Err(PortError::BadMtu {
                name: spec.name.clone(),
                mtu,
            });
        }
    }
    Ok(())
}

/// Opens every port of `specs` (whose ofports are assigned), or none.
/// The frame pool is sized for `spare_xsk` AF_XDP ports more than
/// `specs` has, so that many can be added later with full rings; ports
/// beyond that share its frames (see docs/ports.md).
/// With `cache`, system ports' XDP programs share its flow cache maps, and
/// those with `xdp_redirect` on, or auto and ready, are redirect targets.
pub fn open_ports(
    specs: &[PortSpec],
    spare_xsk: u32,
    threads: usize,
    cache: Option<&CacheMaps>,
) -> Result<OpenedPorts, PortError> {
    // Cheap checks first, so a typo in the last spec fails before anything
    // is attached.
    for spec in specs {
        check_spec(spec)?;
    }

    // Each socket's fill and TX rings (see the module documentation).
    let per_port: Vec<u32> = specs
        .iter()
        .filter_map(|s| match s.port_type {
            PortType::System => Some(s.name.as_str()),
            PortType::Vxlan => s.vxlan.as_ref().map(|v| v.uplink.as_str()),
            PortType::Internal => match s.internal_backend {
                InternalBackend::Tap => None,
                // Not created yet: a veth end has one queue.
                InternalBackend::Veth => Some(""),
            },
        })
        .map(|dev| {
            let queues = netdev::link_by_name(dev).map_or(1, |l| afxdp::queues_served(l.rx_queues));
            queues * 2 * afxdp::ring_size(queues)
        })
        .collect();
    let ring_frames: u32 = per_port.iter().sum();
    // Ports added later get single-queue-sized rings' worth each.
    let spare_frames = spare_xsk.saturating_mul(2 * afxdp::RING_SIZE);
    // Several packet threads split the frames equally (`FramePool::split`)
    // while ports go to them one by one: each gets its own spare frames
    // and room for one more port than an equal share of the rings.
    let threads = threads.max(1) as u32;
    let per_thread_slack = if threads > 1 {
        SPARE_FRAMES + per_port.iter().copied().max().unwrap_or(0)
    } else {
        0
    };
    let n_frames = ring_frames
        .saturating_add(spare_frames)
        .saturating_add(SPARE_FRAMES)
        .saturating_add(per_thread_slack.saturating_mul(threads));
    let umem =
        Umem::with_jumbo(n_frames, FRAME_SIZE, JUMBO_BLOCKS, false).map_err(PortError::Umem)?;
    let mut frames = UmemFrames::new(FramePool::new(&umem).map_err(PortError::Umem)?);

    let mut ports: Vec<(Arc<PortMeta>, Port)> = Vec::with_capacity(specs.len());
    for spec in specs {
        match open_one(spec, &umem, cache) {
            Ok(p) => ports.push(p),
            Err(e) => {
                for (_, port) in ports {
                    port.close(&mut frames);
                }
                return Err(e);
            }
        }
    }
    Ok(OpenedPorts {
        frames,
        umem,
        ports,
    })
}

/// Attaches xbr's XDP program to `link` and binds its AF_XDP sockets
/// on `umem`. With the cache on, cache entries may forward to it as
/// `mode` says (see [`set_redirect`]).
fn attach_xsk(
    name: &str,
    link: &netdev::LinkInfo,
    umem: &Arc<Umem>,
    cache: Option<&CacheMaps>,
    mode: RedirectMode,
) -> Result<XskPort, PortError> {
    let prog = XdpProgram::attach(link.ifindex, XdpModeRequest::Auto, cache).map_err(|source| {
        PortError::Xdp {
            name: name.to_string(),
            source,
        }
    })?;
    let mut port = open_xsk(name, link, prog, umem)?;
    set_redirect(&mut port, name, link, cache, mode)?;
    Ok(port)
}

/// Makes `port`'s device (`link`, of port `name`) a redirect target of
/// the XDP flow cache `cache` as `mode` says: never (`off`, or the cache
/// is off), always (`on`: the operator vouches for it), or while the
/// kernel says it takes redirected frames (`auto`, followed by
/// `redirect::watch`). An `auto` veth whose peer does not, on a bridge
/// with `xdp-peer-gro`, gets GRO turned on in the peer first
/// (`redirect::peer`); if that fails the port stays not ready and says
/// why.
pub(crate) fn set_redirect(
    port: &mut XskPort,
    name: &str,
    link: &netdev::LinkInfo,
    cache: Option<&CacheMaps>,
    mode: RedirectMode,
) -> Result<(), PortError> {
    let Some(cache) = cache else {
        return Ok(());
    };
    cache
        .add_dev(link.ifindex)
        .map_err(|source| PortError::XdpCache {
            name: name.to_string(),
            source,
        })?;
    let readiness = Arc::new(match mode {
        RedirectMode::Off => Readiness::new(mode, Why::ConfiguredOff, false),
        RedirectMode::On => Readiness::new(
            mode,
            Why::ConfiguredOn,
            redirect_takes_frags(name, link.ifindex),
        ),
        RedirectMode::Auto => Readiness::new(mode, Why::NotReady, false),
    });
    // Every port is registered, so that a later change of its mode to
    // `auto` (in place, `change_redirect`) is followed; the watcher leaves
    // `on` and `off` ports alone.
    let reg = watch::register(
        name,
        link.ifindex,
        readiness.clone(),
        cache.generation().clone(),
    );
    if mode == RedirectMode::Auto
        && readiness.why() == Why::NotReady
        && cache.peer_gro()
        && link.kind.as_deref() == Some("veth")
    {
        reg.make_peer_ready(link);
    }
    port.redirect = readiness;
    port.redirect_watch = Some(reg);
    Ok(())
}

/// Applies a port's new `xdp_redirect` in place (OVS applies a changed
/// `options` column to the open netdev): the port keeps its number and
/// its traffic. A port that stops being a target has the cache's
/// entries retired (a generation bump) before this returns.
pub(crate) fn change_redirect(
    readiness: &Arc<Readiness>,
    name: &str,
    ifindex: u32,
    mode: RedirectMode,
    gen: &crate::fastpath::cache::XdpGen,
) {
    readiness.set_mode(mode);
    let stopped = match mode {
        RedirectMode::Off => readiness.set(Why::ConfiguredOff, false),
        RedirectMode::On => readiness.set(Why::ConfiguredOn, redirect_takes_frags(name, ifindex)),
        RedirectMode::Auto => {
            let was = readiness.target();
            watch::recheck(readiness);
            was && !readiness.target()
        }
    };
    if stopped {
        gen.bump();
    }
}

/// Whether XDP flow cache entries may redirect frames in several buffers
/// (jumbo frames) to the device `ifindex`: its driver takes them
/// (`NDO_XMIT_SG`, as the kernel reports it now; for a veth that follows
/// its peer's GRO or XDP program). Asked once for `xdp_redirect=on`;
/// `auto` ports follow it (`redirect::watch`).
/// The kernel drops such a frame redirected to a device without it, and
/// counts it nowhere; kernels before 6.3 cannot say, and then those
/// frames are forwarded by the packet thread.
pub(crate) fn redirect_takes_frags(name: &str, ifindex: u32) -> bool {
    match crate::genl::xdp_features(ifindex) {
        Ok(features) => {
            let frags = features & crate::genl::xdp_act::NDO_XMIT_SG != 0;
            if !frags {
                tracing::info!(
                    port = name,
                    "the device does not take multi-buffer XDP frames: frames larger \
                     than a page to it are forwarded by the packet thread"
                );
            }
            frags
        }
        Err(e) => {
            tracing::info!(port = name, error = %e, "cannot read the device's XDP features: \
                 frames larger than a page to it are forwarded by the packet thread");
            false
        }
    }
}

/// Opens one port on `umem` (any thread; see [`open_xsk`]).
/// Without `cache` (the cache is off) a system port's program gets
/// private, empty cache maps: it never hits and is no redirect target.
pub fn open_one(
    spec: &PortSpec,
    umem: &Arc<Umem>,
    cache: Option<&CacheMaps>,
) -> Result<(Arc<PortMeta>, Port), PortError> {
    let name = spec.name.clone();
    let ofport = spec.ofport.unwrap_or(0);
    match spec.port_type {
        PortType::System => {
            let link = netdev::link_by_name(&name).map_err(|source| match source {
                NetdevError::NotFound(_) => PortError::NoSuchInterface(name.clone()),
                source => PortError::Netdev {
                    name: name.clone(),
                    source,
                },
            })?;
            let port = attach_xsk(&name, &link, umem, cache, spec.xdp_redirect)?;
            tracing::info!(port = %name, ofport, ifindex = link.ifindex, "attached");
            let meta = PortMeta::new(ofport, name, link.mac.unwrap_or_default())
                .with_kind("afxdp")
                .with_redirect(port.redirect.clone());
            Ok((Arc::new(meta), Port::Xsk(port)))
        }
        PortType::Vxlan if spec.vxlan.is_none() => {
            tracing::info!(port = %name, ofport,
                "VXLAN port numbered; no underlay yet, its output is dropped until there is one");
            let meta = PortMeta::new(ofport, name, [0; 6])
                .with_kind("vxlan: key=flow, remote_ip=flow (no underlay yet)");
            Ok((Arc::new(meta), Port::unattached()))
        }
        PortType::Vxlan => {
            let (meta, port) = crate::vxlan::port::open(spec, umem, cache)?;
            Ok((meta, Port::Vxlan(port)))
        }
        PortType::Internal if spec.internal_backend == InternalBackend::Veth => {
            let pair = HostVeth::create(&name, spec.mac, spec.mtu_request).map_err(|source| {
                PortError::HostVeth {
                    name: name.clone(),
                    source: Box::new(source),
                }
            })?;
            let netdev_err = |source| PortError::Netdev {
                name: name.clone(),
                source,
            };
            let host = netdev::link_by_index(pair.ifindex()).map_err(netdev_err)?;
            let link = netdev::link_by_index(pair.peer_ifindex()).map_err(netdev_err)?;
            // The host end has GRO on (HostVeth::create), so the xbr end
            // always accepts redirected frames.
            let mut port = attach_xsk(&name, &link, umem, cache, RedirectMode::On)?;
            if cache.is_some() {
                let frags = port.redirect.frags();
                port.redirect = Arc::new(Readiness::new(RedirectMode::On, Why::Internal, frags));
            }
            tracing::info!(port = %name, ofport, ifindex = host.ifindex, peer = %pair.peer(),
                peer_ifindex = link.ifindex, "internal port created (veth)");
            port.host = Some(pair);
            let meta = PortMeta::new(ofport, name, host.mac.unwrap_or_default())
                .with_kind("internal")
                .with_redirect(port.redirect.clone());
            Ok((Arc::new(meta), Port::Xsk(port)))
        }
        PortType::Internal => {
            let tap_err = |source| PortError::Tap {
                name: name.clone(),
                source,
            };
            let mtu = spec.mtu_request.map(|m| m as u16);
            let tap = TapPort::create(&name, spec.mac, mtu).map_err(tap_err)?;
            let info = tap.info().map_err(tap_err)?;
            tracing::info!(port = %name, ofport, ifindex = tap.ifindex(), "internal port created");
            let meta = PortMeta::new(ofport, name, info.mac.unwrap_or_default()).with_kind("tap");
            Ok((
                Arc::new(meta),
                Port::Internal(InternalPort {
                    tap,
                    io_error_logged: false,
                    oversize_dropped: 0,
                }),
            ))
        }
    }
}
