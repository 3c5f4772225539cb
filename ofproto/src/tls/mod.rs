//! TLS for OpenFlow (`ssl:` controllers, the `pssl:` listener) and for
//! xbr's OVSDB client (`ssl:` remotes), configured as OVS configures its
//! `stream-ssl`: one private key, its certificate and one CA certificate
//! file for the whole process, re-read when a file changes.
//!
//! # Design
//!
//! - [`TlsFiles`]: the three file names, as `--private-key`,
//!   `--certificate`, `--ca-cert` or the database's `SSL` row give them.
//! - [`TlsContext`] (`context.rs`): the rustls configurations built from
//!   those files, cached with the files' modification times and rebuilt
//!   when one changes (OVS's stream-ssl re-reads a changed file too), so
//!   a rotated certificate applies to the next connection; and OVS's
//!   CA bootstrap (trust on first use) while a bootstrapped CA file does
//!   not exist yet. Both sides
//!   authenticate, as OVS requires: each presents a certificate and
//!   must be signed by the CA the other trusts. As in OVS, the peer's
//!   host name is not checked (`verify.rs`); TLS 1.2 and later only.
//! - [`stream`]: one TLS session over a blocking `TcpStream`, shared by
//!   a connection's reader and writer threads (xbr serves each OpenFlow
//!   connection with two), and the handshake, bounded by a deadline so
//!   that a peer that stalls in it holds its thread for no longer than a
//!   silent peer would.
//! - [`TlsError`]: what went wrong, naming the file or the peer, in words
//!   an operator can act on (`describe` turns rustls's errors into them).
//!
//! Why rustls: memory-safe, maintained, and its `ring` provider builds
//! with the C compiler xbr needs anyway (see the workspace Cargo.toml).

mod context;
pub mod stream;
mod verify;

pub use context::TlsContext;

use std::path::{Path, PathBuf};
use thiserror::Error;

/// The files of a TLS configuration (OVS's `SSL` table columns and
/// `stream-ssl` options of the same names).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TlsFiles {
    /// PEM private key (`private_key`, `--private-key`).
    pub private_key: PathBuf,
    /// PEM certificate for that key, optionally followed by the chain
    /// (`certificate`, `--certificate`).
    pub certificate: PathBuf,
    /// PEM CA certificate(s) the peer's certificate must be signed by
    /// (`ca_cert`, `--ca-cert`).
    pub ca_cert: PathBuf,
    /// `ca_cert` may be bootstrapped (`--bootstrap-ca-cert`, the `SSL`
    /// row's `bootstrap_ca_cert`): while the file does not exist, the
    /// first `ssl:` peer's CA certificate is written there (trust on
    /// first use, as OVS), and that connection is dropped.
    pub bootstrap_ca_cert: bool,
}

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("TLS: cannot read the {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TLS: the {what} {path} is not valid PEM: {reason}")]
    BadPem {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("TLS: the {what} {path} holds no {expected}")]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("TLS: the CA certificate {path} cannot be used: {reason}")]
    BadCa { path: PathBuf, reason: String },
    #[error(
        "TLS: the private key {key} and the certificate {cert} cannot be used together: {reason}"
    )]
    KeyPair {
        key: PathBuf,
        cert: PathBuf,
        reason: String,
    },
    #[error("TLS handshake with {peer} failed: {reason}")]
    Handshake { peer: String, reason: String },
    #[error("TLS: no CA certificate in {0} yet: it is bootstrapped from the first ssl: peer")]
    NoCaYet(PathBuf),
    #[error("TLS: could not bootstrap the CA certificate {path} from {peer}: {reason}")]
    Bootstrap {
        path: PathBuf,
        peer: String,
        reason: String,
    },
    #[error("TLS: bootstrapped the CA certificate {path} from {peer}; reconnecting to verify the peer with it")]
    Bootstrapped { path: PathBuf, peer: String },
    #[error("TLS handshake with {peer} not completed within {timeout:?}")]
    HandshakeTimeout {
        peer: String,
        timeout: std::time::Duration,
    },
}

/// An operator's words for why a TLS session with a peer failed;
/// `ca_cert` is the CA file the peer's certificate was checked against.
pub fn describe(e: &rustls::Error, ca_cert: &Path) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(c) => match c {
            C::UnknownIssuer => format!(
                "the peer's certificate is not signed by the CA in {}",
                ca_cert.display()
            ),
            C::Expired | C::ExpiredContext { .. } => "the peer's certificate has expired".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the peer's certificate is not valid yet".into()
            }
            // During path building a bad signature means the CA file
            // holds an issuer of the same name whose key did not sign the
            // certificate: ovs-pki names CAs by creation time, so two PKIs
            // made in the same second collide. To the operator it is the
            // same fault as an unknown issuer.
            C::BadSignature => format!(
                "the peer's certificate is not signed by the CA in {} \
                 (a CA of the same name is there, but its key did not sign it)",
                ca_cert.display()
            ),
            C::BadEncoding => "the peer's certificate is not a valid X.509 certificate".into(),
            other => format!("the peer's certificate was refused: {other:?}"),
        },
        E::NoCertificatesPresented => {
            "the peer presented no certificate (both sides must, as with OVS)".into()
        }
        E::AlertReceived(
            a @ (A::BadCertificate
            | A::UnknownCA
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::CertificateRequired
            | A::UnsupportedCertificate
            | A::DecryptError),
        ) => format!(
            "the peer refused our certificate ({a:?}): is it signed by the CA the peer trusts, \
             and valid?"
        ),
        E::AlertReceived(a) => format!("the peer ended the handshake ({a:?})"),
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            "the peer does not speak TLS (a plain tcp: peer?)".into()
        }
        E::PeerIncompatible(p) => format!("no TLS version or cipher in common ({p:?})"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            private_key: dir.join("key.pem"),
            certificate: dir.join("cert.pem"),
            ca_cert: dir.join("ca.pem"),
            bootstrap_ca_cert: false,
        }
    }

    #[test]
    fn unusable_files_are_named() {
        let dir = std::env::temp_dir().join(format!("xbrt-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = files(&dir);
        let ctx = TlsContext::new(f.clone());
        let e = ctx.check().unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "cannot read the private key {}",
                f.private_key.display()
            )),
            "{e}"
        );
        // A key file with no key in it, then one whose PEM is broken.
        std::fs::write(&f.private_key, "not pem at all\n").unwrap();
        let e = ctx.check().unwrap_err().to_string();
        assert!(e.contains("holds no PEM private key"), "{e}");
        std::fs::write(
            &f.private_key,
            "-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = ctx.check().unwrap_err().to_string();
        assert!(e.contains("is not valid PEM"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn certificate_errors_in_an_operators_words() {
        use rustls::{AlertDescription, CertificateError, Error};
        let ca = Path::new("/etc/ca.pem");
        let d = |e| describe(&e, ca);
        assert_eq!(
            d(Error::InvalidCertificate(CertificateError::UnknownIssuer)),
            "the peer's certificate is not signed by the CA in /etc/ca.pem"
        );
        assert!(d(Error::InvalidCertificate(CertificateError::BadSignature))
            .starts_with("the peer's certificate is not signed by the CA in /etc/ca.pem"));
        assert_eq!(
            d(Error::InvalidCertificate(CertificateError::Expired)),
            "the peer's certificate has expired"
        );
        assert!(d(Error::AlertReceived(AlertDescription::UnknownCA))
            .contains("the peer refused our certificate"));
        assert!(d(Error::NoCertificatesPresented).contains("presented no certificate"));
    }
}
