//! Internal ports backed by a veth pair (`internal_backend=veth`): the
//! host end carries the port's name, MAC and MTU, TCP passes both ways
//! between a pod and the host end, and the pair is gone once xbr stops;
//! a pair left by a killed xbr is replaced on the next start, while a
//! foreign interface of that name, or a pair another xbr serves, is left
//! alone and refused.
//!
//! Needs root and a built `xbr`. xbr runs in the root namespace and the
//! host end is moved into a namespace of the test's own (as the TAP test
//! in lifecycle.rs does), so traffic stays between the test's namespaces;
//! port names are unique per test.

use nix::sys::signal::Signal;
use std::net::Ipv4Addr;
use std::time::Duration;
use xbr_tests::{
    link_exists, link_has_xdp, run_timeout, tcp_transfer_ns, unique_tag, Netns, Pod, Result, Xbr,
    BRIDGE, CMD_TIMEOUT, NAME_PREFIX,
};

const IP_POD: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_HOST: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 1);
const MAC_POD: &str = "0a:58:0a:80:00:02";
const MAC_HOST: &str = "0a:58:0a:80:00:01";
/// Bytes per TCP transfer: many segments, bounded time.
const TCP_BYTES: usize = 4_000_000;

/// The xbr end's name, from the host end's `N: NAME@PEER: ...` line;
/// xbr names it `xbr-...` (see dataplane/src/hostveth.rs).
fn peer_of(name: &str) -> Result<String> {
    let line = link_line(name)?;
    let peer = line
        .split_once(&format!("{name}@"))
        .and_then(|(_, rest)| rest.split_once(':'))
        .map(|(p, _)| p.to_string())
        .unwrap_or_default();
    assert!(
        peer.starts_with("xbr-") && peer.len() <= 15,
        "{name} is not a veth to an xbr end: {line}"
    );
    Ok(peer)
}

fn ip(args: &[&str]) -> Result<xbr_tests::CmdOutput> {
    run_timeout(std::process::Command::new("ip").args(args), CMD_TIMEOUT)
}

fn link_line(name: &str) -> Result<String> {
    Ok(ip(&["-o", "link", "show", "dev", name])?.ok()?.stdout)
}

/// A unique internal port name (12 bytes: its peer name is the hashed
/// form, so both naming rules get exercised across the tests).
fn port_name() -> String {
    format!("{NAME_PREFIX}{}", unique_tag())
}

#[test]
fn veth_internal_port_carries_tcp_both_ways_and_goes_with_xbr() -> Result<()> {
    let pod = Pod::new(IP_POD, 24, MAC_POD)?;
    let host_ns = Netns::new()?;
    let name = port_name();
    let pod_spec = format!("{}=1", pod.host_if());
    let int_spec =
        format!("{name}=2,type=internal,internal_backend=veth,mac={MAC_HOST},mtu_request=1400");
    let mut xbr = Xbr::start(&["--port", &pod_spec, "--port", &int_spec])?;
    let peer = peer_of(&name)?;

    // The host end: the port's name, MAC and MTU; the xbr end attached.
    let line = link_line(&name)?;
    assert!(
        line.contains("mtu 1400") && line.contains(&format!("link/ether {MAC_HOST}")),
        "host end lacks the MAC/MTU: {line}"
    );
    assert!(link_has_xdp(&peer)?, "no XDP program on {peer}");
    let show = xbr.ofctl_ok(&["show", BRIDGE])?;
    assert!(
        show.contains(&format!(" 2({name}): addr:{MAC_HOST}")),
        "`show` lacks the internal port with its MAC:\n{show}"
    );

    ip(&["link", "set", &name, "netns", host_ns.name()])?.ok()?;
    let in_host = |args: &[&str]| -> Result<()> {
        let mut argv = vec!["ip"];
        argv.extend_from_slice(args);
        host_ns.exec(&argv, CMD_TIMEOUT)?.ok().map(drop)
    };
    in_host(&["addr", "add", &format!("{IP_HOST}/24"), "dev", &name])?;
    in_host(&["link", "set", &name, "up"])?;
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")?;

    // Pod -> host, then host -> pod: the host stack sends partial
    // checksums through the veth, which xbr completes; a bad one would
    // be retransmitted until the transfer times out.
    let want = TCP_BYTES.to_string();
    let up = tcp_transfer_ns(
        (pod.ns(), IP_POD),
        (&host_ns, IP_HOST),
        IP_HOST,
        (40001, 5001),
        TCP_BYTES,
        false,
    )?;
    assert_eq!(up, want, "pod -> host\n{}", xbr.log());
    let down = tcp_transfer_ns(
        (&host_ns, IP_HOST),
        (pod.ns(), IP_POD),
        IP_POD,
        (40002, 5002),
        TCP_BYTES,
        false,
    )?;
    assert_eq!(down, want, "host -> pod\n{}", xbr.log());
    let ports = xbr.ofctl_ok(&["dump-ports", BRIDGE, "2"])?;
    assert!(
        !ports.contains("rx pkts=0,"),
        "port 2 counted nothing:\n{ports}"
    );

    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "xbr exited with {status}\n{}", xbr.log());
    let in_ns = host_ns.exec(&["ip", "link", "show", "dev", &name], CMD_TIMEOUT)?;
    assert!(
        !in_ns.success() && !link_exists(&peer)?,
        "the veth pair {name}/{peer} outlived xbr"
    );
    Ok(())
}

#[test]
fn a_leftover_pair_is_replaced_and_foreign_or_served_names_are_refused() -> Result<()> {
    let pod = Pod::new(IP_POD, 24, MAC_POD)?;
    let name = port_name();
    let pod_spec = format!("{}=1", pod.host_if());
    let int_spec = format!("{name}=2,type=internal,internal_backend=veth");
    let args = ["--port", pod_spec.as_str(), "--port", int_spec.as_str()];

    // Killed hard: nothing deletes the pair, the kernel detaches XDP.
    let mut xbr = Xbr::start(&args)?;
    let peer = peer_of(&name)?;
    let first = link_line(&name)?;
    xbr.stop(Signal::SIGKILL)?;
    assert!(
        link_exists(&name)? && link_exists(&peer)?,
        "the pair did not survive SIGKILL"
    );

    // Restarted: the leftover is replaced by a new pair.
    xbr.restart(&args)?;
    let second = link_line(&name)?;
    let index = |l: &str| l.split(':').next().map(str::to_string);
    assert_ne!(
        index(&first),
        index(&second),
        "the leftover was not replaced:\n{first}\n{second}"
    );
    assert!(link_has_xdp(&peer)?, "no XDP program on {peer}");

    // While it serves the port, another xbr (own run directory, other
    // pod) must not take the pair over.
    let other = Pod::new(Ipv4Addr::new(10, 128, 0, 3), 24, "0a:58:0a:80:00:03")?;
    let other_spec = format!("{}=1", other.host_if());
    let (out, _dir) = Xbr::run_once(
        &["--port", &other_spec, "--port", &int_spec],
        Duration::from_secs(20),
    )?;
    assert!(
        !out.success() && out.stderr.contains("another xbr is serving"),
        "a second xbr took the served pair over: {}\n{}",
        out.describe_status(),
        out.stderr
    );
    assert_eq!(
        index(&link_line(&name)?),
        index(&second),
        "the served pair was replaced"
    );
    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "xbr exited with {status}\n{}", xbr.log());
    assert!(
        !link_exists(&name)? && !link_exists(&peer)?,
        "the pair outlived xbr"
    );

    // A foreign veth of that name (its peer named otherwise) is refused
    // and left alone.
    let foreign_peer = format!("{NAME_PREFIX}{}", unique_tag());
    ip(&[
        "link",
        "add",
        &name,
        "type",
        "veth",
        "peer",
        "name",
        &foreign_peer,
    ])?
    .ok()?;
    let (out, _dir) = Xbr::run_once(&args, Duration::from_secs(20))?;
    let still = link_exists(&name)? && link_exists(&foreign_peer)?;
    let _ = ip(&["link", "del", &name]);
    assert!(
        !out.success() && out.stderr.contains("already exists"),
        "xbr accepted a foreign interface: {}\n{}",
        out.describe_status(),
        out.stderr
    );
    assert!(still, "xbr deleted a foreign interface");
    Ok(())
}
