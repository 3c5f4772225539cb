//! TLS on the real binary (issue 32; docs/tls.md), with certificates made
//! by `ovs-pki` as an OVS operator makes them:
//! - `ovs-ofctl` over `ssl:` against xbr's `pssl:` listener (OpenSSL as
//!   the peer), a client with a certificate from another CA refused with
//!   a clear log line while the listener keeps serving, and the
//!   listener's bounds (connections, the HELLO timeout) holding for
//!   clients that stall before or in the TLS handshake;
//! - xbr connecting out to an `ssl:` controller: OVS's
//!   `ovs-testcontroller pssl:` (OpenSSL) programming its table-miss flow,
//!   and a TLS server that checks HELLO and FEATURES; refusing one whose
//!   certificate another CA signed;
//! - xbr as the client of `ovsdb-server --remote=pssl:` bringing a bridge
//!   up, the `SSL` table (`ovs-vsctl set-ssl`) and a controller's TLS
//!   failure in its `status:last_error`;
//! - a new `SSL` row taken by the next TLS connections while a
//!   management connection stays up;
//! - `--bootstrap-ca-cert`: the first controller's CA written and used;
//! - bad files refused at start, from the flags or the `--config` file.
//!
//! Needs root and a built `xbr`, like every end-to-end test.

use ofproto::tls::{TlsContext, TlsFiles};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xbr_tests::openflow::wait_closed;
use xbr_tests::openflow::{OFPT_ECHO_REPLY, OFPT_ECHO_REQUEST};
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::played_controller::{Heard, PlayedController};
use xbr_tests::xbr_stats::limit_count;
use xbr_tests::{
    free_local_port, require_root, require_tool, run_timeout, unique_tag, Background, CmdOutput,
    HarnessError, Result, Xbr, BRIDGE,
};

const WAIT: Duration = Duration::from_secs(20);

fn unexpected(what: String) -> HarnessError {
    HarnessError::Unexpected(what)
}

/// Two PKIs made with `ovs-pki` in a directory removed on drop: `pki`
/// (its switchca signed `sw`, its controllerca `ctl` and, with `openssl`,
/// `exp`, which expired yesterday) and `other` (whose controllerca signed
/// `rogue`).
struct Pki {
    dir: PathBuf,
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Pki {
    fn new() -> Result<Pki> {
        require_root()?;
        require_tool("ovs-pki")?;
        require_tool("openssl")?;
        let dir = std::env::temp_dir().join(format!("xbrt-tls-{}", unique_tag()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| unexpected(format!("creating {}: {e}", dir.display())))?;
        let pki = Pki { dir };
        let log = format!("--log={}", pki.path("ovs-pki.log"));
        for (ca, reqs) in [
            ("pki", &[("sw", "switch"), ("ctl", "controller")][..]),
            ("other", &[("rogue", "controller")][..]),
        ] {
            let dir_arg = format!("--dir={}", pki.path(ca));
            let ovs_pki = |args: &[&str]| -> Result<()> {
                let mut cmd = Command::new("ovs-pki");
                cmd.args([dir_arg.as_str(), log.as_str()])
                    .args(args)
                    .current_dir(&pki.dir)
                    .stdin(Stdio::null());
                run_timeout(&mut cmd, Duration::from_secs(120))?.ok()?;
                Ok(())
            };
            ovs_pki(&["init"])?;
            for (name, kind) in reqs {
                ovs_pki(&["req+sign", name, kind])?;
            }
        }
        // A certificate of the right CA whose validity ended yesterday
        // (X.509 v3, as ovs-pki's: a v1 one would be refused for that).
        let ext = pki.path("v3.ext");
        std::fs::write(&ext, "basicConstraints=CA:FALSE\n")
            .map_err(|e| unexpected(format!("writing {ext}: {e}")))?;
        let openssl = |args: &[&str]| -> Result<()> {
            let mut cmd = Command::new("openssl");
            cmd.args(args).current_dir(&pki.dir).stdin(Stdio::null());
            run_timeout(&mut cmd, Duration::from_secs(60))?.ok()?;
            Ok(())
        };
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "exp-privkey.pem",
            "-subj",
            "/CN=expired",
            "-out",
            "exp-req.pem",
        ])?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            "exp-req.pem",
            "-CA",
            "pki/controllerca/cacert.pem",
            "-CAkey",
            "pki/controllerca/private/cakey.pem",
            "-CAcreateserial",
            "-days",
            "-1",
            "-extfile",
            "v3.ext",
            "-out",
            "exp-cert.pem",
        ])?;
        Ok(pki)
    }

    fn path(&self, rel: &str) -> String {
        self.dir.join(rel).to_string_lossy().into_owned()
    }

    /// xbr's flags: the switch's key and certificate, and the CA its
    /// controllers' certificates are signed by.
    fn switch_args(&self) -> Vec<String> {
        vec![
            "--private-key".into(),
            self.path("sw-privkey.pem"),
            "--certificate".into(),
            self.path("sw-cert.pem"),
            "--ca-cert".into(),
            self.path("pki/controllerca/cacert.pem"),
        ]
    }

    /// A controller's files (`ctl` or `rogue`), trusting the switch CA.
    fn controller_files(&self, who: &str) -> TlsFiles {
        TlsFiles {
            private_key: self.path(&format!("{who}-privkey.pem")).into(),
            certificate: self.path(&format!("{who}-cert.pem")).into(),
            ca_cert: self.path("pki/switchca/cacert.pem").into(),
            bootstrap_ca_cert: false,
        }
    }

    /// `ovs-ofctl -O OpenFlow13` with the TLS options of `who`.
    fn ofctl(&self, who: &str, args: &[&str]) -> Result<CmdOutput> {
        let f = self.controller_files(who);
        let mut cmd = Command::new("ovs-ofctl");
        cmd.args(["-O", "OpenFlow13"])
            .arg(format!("--private-key={}", f.private_key.display()))
            .arg(format!("--certificate={}", f.certificate.display()))
            .arg(format!("--ca-cert={}", f.ca_cert.display()))
            .args(args);
        run_timeout(&mut cmd, WAIT)
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    while !f()? {
        if Instant::now() >= deadline {
            return Err(unexpected(format!("not within {WAIT:?}: {what}")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// A TLS server with `files` on an ephemeral port that accepts (and
/// attempts a handshake with) whoever connects until dropped; what each
/// handshake gave is sent to the returned receiver.
struct TlsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type Accepted = std::result::Result<
    (
        ofproto::tls::stream::TlsReader,
        ofproto::tls::stream::TlsWriter,
    ),
    String,
>;

impl TlsServer {
    fn start(files: TlsFiles) -> Result<(TlsServer, std::sync::mpsc::Receiver<Accepted>)> {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| unexpected(format!("bind: {e}")))?;
        let addr = l
            .local_addr()
            .map_err(|e| unexpected(format!("local_addr: {e}")))?;
        l.set_nonblocking(true)
            .map_err(|e| unexpected(format!("nonblocking: {e}")))?;
        let ctx = TlsContext::new(files);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((sock, peer)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let _ = sock.set_nonblocking(false);
                let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
                let got = ofproto::tls::stream::accept(
                    &ctx,
                    sock,
                    &peer.to_string(),
                    Duration::from_secs(10),
                )
                .map_err(|e| e.to_string());
                if tx.send(got).is_err() {
                    break;
                }
            }
        });
        Ok((
            TlsServer {
                addr,
                stop,
                thread: Some(thread),
            },
            rx,
        ))
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one OpenFlow message (bounded), retrying read timeouts.
fn read_message(r: &mut impl Read) -> Result<Vec<u8>> {
    let deadline = Instant::now() + WAIT;
    let mut fill = |buf: &mut [u8]| -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            if Instant::now() >= deadline {
                return Err(unexpected("no OpenFlow message from xbr".into()));
            }
            match r.read(&mut buf[got..]) {
                Ok(0) => return Err(unexpected("xbr closed the connection".into())),
                Ok(n) => got += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(unexpected(format!("reading from xbr: {e}"))),
            }
        }
        Ok(())
    };
    let mut msg = vec![0u8; 8];
    fill(&mut msg)?;
    let len = usize::from(u16::from_be_bytes([msg[2], msg[3]])).max(8);
    msg.resize(len, 0);
    fill(&mut msg[8..])?;
    Ok(msg)
}

#[test]
fn ovs_ofctl_over_ssl_against_pssl_and_the_listener_bounds_hold() -> Result<()> {
    let pki = Pki::new()?;
    let port = free_local_port()?;
    let listen = format!("pssl:{port}");
    let mut args: Vec<String> = ["--xdp-cache", "off", "--max-connections", "2", "--listen"]
        .map(String::from)
        .to_vec();
    args.push(listen);
    args.extend(pki.switch_args());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let xbr = Xbr::start(&argv)?;
    let target = format!("ssl:127.0.0.1:{port}");

    pki.ofctl("ctl", &["add-flow", &target, "priority=5,ip,actions=drop"])?
        .ok()?;
    let dump = pki.ofctl("ctl", &["dump-flows", &target])?.ok()?.stdout;
    assert!(dump.contains("priority=5,ip actions=drop"), "{dump}");

    // A client whose certificate another CA signed is refused, naming
    // the CA file; the listener serves the next one.
    let rogue = pki.ofctl("rogue", &["dump-flows", &target])?;
    assert!(
        !rogue.success(),
        "a rogue client got through: {}",
        rogue.stdout
    );
    let ca = pki.path("pki/controllerca/cacert.pem");
    let line = format!("the peer's certificate is not signed by the CA in {ca}");
    wait_for("the rogue client's log line", || {
        Ok(xbr.log().contains(&line))
    })?;
    let dump = pki.ofctl("ctl", &["dump-flows", &target])?.ok()?.stdout;
    assert!(dump.contains("priority=5,ip actions=drop"), "{dump}");
    // One whose certificate expired.
    let expired = pki.ofctl("exp", &["dump-flows", &target])?;
    assert!(!expired.success(), "an expired certificate got through");
    wait_for("the expired client's log line", || {
        Ok(xbr.log().contains("the peer's certificate has expired"))
    })?;

    // Two clients that stall, one before the handshake and one in it,
    // take the listener's two slots: the next is refused while they
    // last, and both are closed by the HELLO timeout.
    std::thread::sleep(Duration::from_millis(500));
    let addr = format!("127.0.0.1:{port}");
    let connect = || TcpStream::connect(&addr).map_err(|e| unexpected(format!("connect: {e}")));
    let mut silent = connect()?;
    let mut partial = connect()?;
    // The first bytes of a ClientHello record, and no more.
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00])
        .map_err(|e| unexpected(format!("write: {e}")))?;
    std::thread::sleep(Duration::from_millis(200));
    let refused = pki.ofctl("ctl", &["dump-flows", &target])?;
    assert!(!refused.success(), "a third connection got through");
    for s in [&mut silent, &mut partial] {
        let took = wait_closed(s, WAIT)?;
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
    }
    std::thread::sleep(Duration::from_millis(200));
    pki.ofctl("ctl", &["dump-flows", &target])?.ok()?;
    assert!(
        xbr.log().contains("not completed within"),
        "no handshake timeout logged:\n{}",
        xbr.log()
    );

    let stats = xbr.client_ok(&["stats", BRIDGE])?;
    assert!(limit_count(&stats, "hello_timeouts") >= 2, "{stats}");
    assert!(limit_count(&stats, "connections_refused") >= 1, "{stats}");
    assert!(limit_count(&stats, "tls_failures") >= 1, "{stats}");

    // A CA file replaced while running applies to the next connection
    // (as OVS re-reads a changed file): the other PKI's controller CA
    // lets `rogue` in and keeps `ctl` out.
    std::fs::copy(
        pki.path("other/controllerca/cacert.pem"),
        pki.path("pki/controllerca/cacert.pem"),
    )
    .map_err(|e| unexpected(format!("replacing the CA file: {e}")))?;
    let dump = pki.ofctl("rogue", &["dump-flows", &target])?.ok()?.stdout;
    assert!(dump.contains("priority=5,ip actions=drop"), "{dump}");
    assert!(!pki.ofctl("ctl", &["dump-flows", &target])?.success());
    Ok(())
}

#[test]
fn xbr_connects_to_an_ssl_controller_and_refuses_one_of_another_ca() -> Result<()> {
    let pki = Pki::new()?;
    let (good, accepted) = TlsServer::start(pki.controller_files("ctl"))?;
    let (rogue, _rogue_accepted) = TlsServer::start(pki.controller_files("rogue"))?;
    // A controller that trusts another switch CA than the one that
    // signed xbr's certificate.
    let (picky, _picky_accepted) = TlsServer::start(TlsFiles {
        ca_cert: pki.path("other/switchca/cacert.pem").into(),
        ..pki.controller_files("ctl")
    })?;
    let good_target = format!("ssl:{}", good.addr);
    let rogue_target = format!("ssl:{}", rogue.addr);
    let picky_target = format!("ssl:{}", picky.addr);
    let mut args: Vec<String> = vec!["--xdp-cache".into(), "off".into()];
    for t in [&good_target, &rogue_target, &picky_target] {
        args.push("--controller".into());
        args.push(t.clone());
    }
    args.extend(pki.switch_args());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let xbr = Xbr::start(&argv)?;

    let (mut r, mut w) = accepted
        .recv_timeout(WAIT)
        .map_err(|e| unexpected(format!("xbr did not connect: {e}\n{}", xbr.log())))?
        .map_err(|e| unexpected(format!("handshake with xbr: {e}\n{}", xbr.log())))?;
    // xbr says HELLO first, then answers FEATURES_REQUEST.
    let hello = read_message(&mut r)?;
    assert_eq!((hello[0], hello[1]), (4, 0), "not a 1.3 HELLO: {hello:?}");
    let mut out = vec![4, 0, 0, 8, 0, 0, 0, 1];
    out.extend_from_slice(&[4, 5, 0, 8, 0, 0, 0, 7]);
    w.write_all(&out)
        .map_err(|e| unexpected(format!("write: {e}")))?;
    let reply = loop {
        let m = read_message(&mut r)?;
        if m[1] == 6 {
            break m;
        }
    };
    assert_eq!(&reply[4..8], &[0, 0, 0, 7], "FEATURES_REPLY xid");
    assert!(xbr.log().contains("connected to controller (TLS)"));

    // The other controller's certificate is signed by a CA xbr does not
    // trust: refused, naming the controller and the CA file.
    let ca = pki.path("pki/controllerca/cacert.pem");
    let line = format!(
        "OpenFlow controller {rogue_target}: TLS handshake with {} failed: the peer's \
         certificate is not signed by the CA in {ca}",
        rogue.addr
    );
    wait_for("the rogue controller's log line", || {
        Ok(xbr.log().contains(&line))
    })?;
    // The picky one refuses xbr's certificate (in TLS 1.3, after xbr's
    // side of the handshake is done): said with the controller's address.
    wait_for("the picky controller's log line", || {
        Ok(xbr.log().lines().any(|l| {
            l.contains(&picky.addr.to_string()) && l.contains("the peer refused our certificate")
        }))
    })?;
    Ok(())
}

/// `ovs-testcontroller pssl:` as xbr's `ssl:` controller (sending its
/// CA certificate along, for a switch that bootstraps it); `switch_args`
/// are xbr's TLS flags. Returns once the controller's table-miss flow is
/// in xbr.
fn under_ovs_testcontroller(pki: &Pki, switch_args: &[String]) -> Result<Xbr> {
    require_tool("ovs-testcontroller")?;
    let port = free_local_port()?;
    let f = pki.controller_files("ctl");
    let ctl_path = pki.path("testcontroller.ctl");
    let mut cmd = Command::new("ovs-testcontroller");
    cmd.arg(format!("pssl:{port}:127.0.0.1"))
        .arg(format!("--private-key={}", f.private_key.display()))
        .arg(format!("--certificate={}", f.certificate.display()))
        .arg(format!("--ca-cert={}", f.ca_cert.display()))
        .arg(format!(
            "--peer-ca-cert={}",
            pki.path("pki/controllerca/cacert.pem")
        ))
        .arg(format!("--unixctl={ctl_path}"))
        .arg("-vconsole:off");
    let controller = Background::spawn(&mut cmd)?;
    let target = format!("ssl:127.0.0.1:{port}");
    let mut args: Vec<String> = vec![
        "--xdp-cache".into(),
        "off".into(),
        "--controller".into(),
        target,
    ];
    args.extend(switch_args.iter().cloned());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let xbr = Xbr::start(&argv)?;
    // The learning switch's OpenFlow 1.3 table-miss flow, sent over TLS.
    wait_for("ovs-testcontroller's table-miss flow", || {
        Ok(xbr
            .dump_flows()?
            .contains("priority=0 actions=CONTROLLER:128"))
    })?;
    assert!(xbr.log().contains("connected to controller (TLS)"));
    drop(controller);
    Ok(xbr)
}

#[test]
fn ovs_testcontroller_programs_xbr_over_ssl() -> Result<()> {
    let pki = Pki::new()?;
    under_ovs_testcontroller(&pki, &pki.switch_args())?;
    Ok(())
}

/// The PEM body (base64 lines) of a certificate file.
fn pem_body(path: &str) -> Result<String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| unexpected(format!("reading {path}: {e}")))?;
    Ok(text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect())
}

#[test]
fn the_ca_is_bootstrapped_from_the_first_controller_as_ovs_does() -> Result<()> {
    let pki = Pki::new()?;
    let boot = pki.path("bootstrapped-cacert.pem");
    let args: Vec<String> = vec![
        "--private-key".into(),
        pki.path("sw-privkey.pem"),
        "--certificate".into(),
        pki.path("sw-cert.pem"),
        "--bootstrap-ca-cert".into(),
        boot.clone(),
    ];
    let xbr = under_ovs_testcontroller(&pki, &args)?;
    // The controller's CA, written as PEM; the first connection was
    // dropped, the next one verified with it.
    assert_eq!(
        pem_body(&boot)?,
        pem_body(&pki.path("pki/controllerca/cacert.pem"))?
    );
    let log = xbr.log();
    assert!(log.contains("bootstrapped the CA certificate"), "{log}");
    Ok(())
}

#[test]
fn bridges_from_ovsdb_server_over_ssl_and_controller_tls_errors_in_status() -> Result<()> {
    let pki = Pki::new()?;
    let port = free_local_port()?;
    let server_args = vec![
        format!("--remote=pssl:{port}:127.0.0.1"),
        format!("--private-key={}", pki.path("ctl-privkey.pem")),
        format!("--certificate={}", pki.path("ctl-cert.pem")),
        format!("--ca-cert={}", pki.path("pki/switchca/cacert.pem")),
    ];
    let mut db = OvsDb::start_with(None, &server_args)?;
    let mut extra: Vec<String> = vec!["--xdp-cache".into(), "off".into()];
    extra.extend(pki.switch_args());
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    db.start_xbr_with(&format!("ssl:127.0.0.1:{port}"), &extra)?;
    db.add_secure_bridge(BRIDGE)?;
    wait_for("the bridge from the database", || {
        Ok(db.ofctl(&["dump-flows", BRIDGE])?.success())
    })?;

    // The SSL table, and a controller whose certificate another CA
    // signed: its Controller row says why it is not connected.
    let (rogue, _accepted) = TlsServer::start(pki.controller_files("rogue"))?;
    db.vsctl(&[
        "set-ssl",
        &pki.path("sw-privkey.pem"),
        &pki.path("sw-cert.pem"),
        &pki.path("pki/controllerca/cacert.pem"),
    ])?
    .ok()?;
    db.vsctl(&["set-controller", BRIDGE, &format!("ssl:{}", rogue.addr)])?
        .ok()?;
    let mut last = String::new();
    let found = wait_for("Controller status:last_error", || {
        last = db
            .vsctl(&["--columns=is_connected,status", "list", "Controller"])?
            .ok()?
            .stdout;
        Ok(last.contains("not signed by the CA") && last.contains("is_connected        : false"))
    });
    if let Err(e) = found {
        return Err(unexpected(format!("{e}\n{last}\n{}", db.xbr_log())));
    }
    Ok(())
}

/// A new `SSL` row (here: another CA to trust) is taken by the next TLS
/// connections, as OVS takes new TLS settings: those the `pssl:` target
/// accepts, and the next attempt of an `ssl:` controller. The OpenFlow
/// server is not restarted for it, so a connection to the management
/// socket stays up (a restart cut it before).
#[test]
fn a_new_ssl_row_is_taken_by_the_next_connections_and_cuts_none() -> Result<()> {
    let pki = Pki::new()?;
    let port = free_local_port()?;
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.add_secure_bridge(BRIDGE)?;
    let set_ssl = |ca: &str| -> Result<()> {
        db.vsctl(&[
            "set-ssl",
            &pki.path("sw-privkey.pem"),
            &pki.path("sw-cert.pem"),
            &pki.path(ca),
        ])?
        .ok()?;
        Ok(())
    };
    set_ssl("pki/controllerca/cacert.pem")?;
    // A controller whose certificate the other CA signed: refused until
    // the switch trusts that CA.
    let (rogue, rogue_accepted) = TlsServer::start(pki.controller_files("rogue"))?;
    db.vsctl(&[
        "set-controller",
        BRIDGE,
        &format!("pssl:{port}:127.0.0.1"),
        &format!("ssl:{}", rogue.addr),
    ])?
    .ok()?;
    let target = format!("ssl:127.0.0.1:{port}");
    let dumps =
        |who: &str| -> Result<bool> { Ok(pki.ofctl(who, &["dump-flows", &target])?.success()) };
    wait_for(
        "ovs-ofctl over ssl with the controller CA's certificate",
        || dumps("ctl"),
    )?;
    assert!(!dumps("rogue")?, "a certificate of another CA was taken");
    let mut mgmt = PlayedController::connect_unix(&db.run_dir().join(format!("{BRIDGE}.mgmt")))?;
    // Until now every attempt of the controller failed.
    while let Ok(got) = rogue_accepted.try_recv() {
        assert!(got.is_err(), "the ssl: controller got in before the change");
    }
    // Trust the other CA instead: its client gets in, the first no longer.
    set_ssl("other/controllerca/cacert.pem")?;
    wait_for("ovs-ofctl over ssl with the other CA's certificate", || {
        dumps("rogue")
    })?;
    assert!(!dumps("ctl")?, "the CA no longer trusted still is");
    // The controller's next attempt (after its backoff, at most 8 s)
    // completes the handshake.
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rogue_accepted.recv_timeout(left) {
            Ok(Ok(_)) => break,
            Ok(Err(_)) => continue,
            Err(e) => {
                return Err(unexpected(format!(
                    "the ssl: controller never got a handshake with the new CA: {e}\n{}",
                    db.xbr_log()
                )))
            }
        }
    }
    // The management connection lived through it (answering probes).
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        match mgmt.hear()? {
            Heard::Closed => {
                return Err(unexpected(format!(
                    "the management connection was closed by the SSL change\n{}",
                    db.xbr_log()
                )))
            }
            Heard::Message(m) if m[1] == OFPT_ECHO_REQUEST => {
                let mut reply = m.clone();
                reply[1] = OFPT_ECHO_REPLY;
                mgmt.send(&reply)?;
            }
            Heard::Message(_) | Heard::Quiet => {}
        }
    }
    Ok(())
}

#[test]
fn unusable_tls_files_are_refused_at_start() -> Result<()> {
    let pki = Pki::new()?;
    let missing = pki.path("nope.pem");
    let cert = pki.path("sw-cert.pem");
    let ca = pki.path("pki/controllerca/cacert.pem");
    let (out, _dir) = Xbr::run_once(
        &[
            "--listen",
            "pssl:0",
            "--private-key",
            &missing,
            "--certificate",
            &cert,
            "--ca-cert",
            &ca,
        ],
        WAIT,
    )?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("cannot read the private key {missing}")),
        "{}",
        out.stderr
    );
    // A certificate given as the key: not a PEM private key.
    let (out, _dir) = Xbr::run_once(
        &[
            "--listen",
            "pssl:0",
            "--private-key",
            &cert,
            "--certificate",
            &cert,
            "--ca-cert",
            &ca,
        ],
        WAIT,
    )?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("the private key {cert}")),
        "{}",
        out.stderr
    );
    let (out, _dir) = Xbr::run_once(&["--listen", "pssl:0"], WAIT)?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("need --private-key"), "{}", out.stderr);
    // The same settings from the configuration file, keys named as the
    // flags.
    let conf = pki.path("xbr.conf");
    std::fs::write(
        &conf,
        format!("listen = pssl:0\nprivate-key = {missing}\ncertificate = {cert}\nca-cert = {ca}\n"),
    )
    .map_err(|e| unexpected(format!("writing {conf}: {e}")))?;
    let (out, _dir) = Xbr::run_once(&["--config", &conf], WAIT)?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("cannot read the private key {missing}")),
        "{}",
        out.stderr
    );
    Ok(())
}
