//! The rustls configurations of one [`TlsFiles`], rebuilt when a file
//! changes.
//!
//! Stores the last configurations built and the modification times of
//! the three files they were built from, behind a mutex taken once per
//! new connection (three `stat`s; the files are read again only when a
//! time differs, as OVS's stream-ssl does). A file that fails to load is
//! an error for every connection until it is fixed; nothing is cached
//! then, so the fix applies to the next connection.

use super::verify::{Bootstrap, NoHostnameCheck};
use super::{TlsError, TlsFiles};
use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

/// See the module documentation.
pub struct TlsContext {
    files: TlsFiles,
    cache: Mutex<Option<Built>>,
}

struct Built {
    stamps: [Option<SystemTime>; 3],
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("files", &self.files)
            .finish()
    }
}

impl TlsContext {
    pub fn new(files: TlsFiles) -> Arc<TlsContext> {
        Arc::new(TlsContext {
            files,
            cache: Mutex::new(None),
        })
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The configuration of the passive side (`pssl:`): our certificate,
    /// and a client certificate signed by the CA required.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        if self.bootstrapping() {
            return Err(TlsError::NoCaYet(self.files.ca_cert.clone()));
        }
        self.current().map(|b| b.0)
    }

    /// Whether the CA certificate is still to be bootstrapped: asked for,
    /// and its file does not exist.
    pub fn bootstrapping(&self) -> bool {
        self.files.bootstrap_ca_cert && !self.files.ca_cert.exists()
    }

    /// The configuration of the active side (`ssl:`): the server's
    /// certificate must be signed by the CA (its name is not checked, as
    /// in OVS), and ours is presented.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        if self.bootstrapping() {
            return bootstrap_client(&self.files);
        }
        self.current().map(|b| b.1)
    }

    /// Loads the files now: for checking a configuration when it is given.
    pub fn check(&self) -> Result<(), TlsError> {
        if self.bootstrapping() {
            return bootstrap_client(&self.files).map(|_| ());
        }
        self.current().map(|_| ())
    }

    /// Takes the CA certificate `chain` (a bootstrapping connection's
    /// peer chain) ends with, as OVS's stream-ssl does: the peer must
    /// have sent it after its own (OVS's `--peer-ca-cert`), and its own
    /// must be signed by it. Written as PEM to the CA file, created
    /// exclusively (a file another connection bootstrapped meanwhile is
    /// not overwritten). The connection itself is not to be used.
    pub(super) fn bootstrap_from(
        &self,
        chain: &[CertificateDer<'static>],
        peer: &str,
    ) -> Result<(), TlsError> {
        use base64::Engine;
        let path = &self.files.ca_cert;
        let failed = |reason: String| TlsError::Bootstrap {
            path: path.clone(),
            peer: peer.to_string(),
            reason,
        };
        let (Some(own), Some(ca), true) = (chain.first(), chain.last(), chain.len() >= 2) else {
            return Err(failed(
                "the peer sent no CA certificate after its own (OVS peers send it with \
                 --peer-ca-cert)"
                    .into(),
            ));
        };
        let mut roots = RootCertStore::empty();
        roots
            .add(ca.clone())
            .map_err(|e| failed(format!("its CA certificate cannot be used: {e}")))?;
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .map_err(|e| failed(e.to_string()))?;
        let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let middle = chain.get(1..chain.len() - 1).unwrap_or_default();
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            &NoHostnameCheck(verifier),
            own,
            middle,
            &name,
            &[],
            rustls::pki_types::UnixTime::now(),
        )
        .map_err(|e| {
            failed(format!(
                "its certificate does not check against the CA it sent: {e}"
            ))
        })?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(ca.as_ref());
        let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| failed(format!("creating the file: {e}")))?;
        std::io::Write::write_all(&mut f, pem.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| failed(format!("writing the file: {e}")))?;
        tracing::info!(ca_cert = %path.display(), %peer, "bootstrapped the CA certificate");
        Ok(())
    }

    fn current(&self) -> Result<(Arc<ServerConfig>, Arc<ClientConfig>), TlsError> {
        let f = &self.files;
        let stamps = [&f.private_key, &f.certificate, &f.ca_cert]
            .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        let mut cache = self.cache.lock();
        if let Some(b) = cache.as_ref().filter(|b| b.stamps == stamps) {
            return Ok((b.server.clone(), b.client.clone()));
        }
        *cache = None;
        let (server, client) = build(f)?;
        tracing::info!(private_key = %f.private_key.display(), certificate = %f.certificate.display(),
            ca_cert = %f.ca_cert.display(), "TLS key, certificate and CA certificate loaded");
        *cache = Some(Built {
            stamps,
            server: server.clone(),
            client: client.clone(),
        });
        Ok((server, client))
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_path_buf(),
            expected: "PEM certificate (BEGIN CERTIFICATE)",
        });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    const WHAT: &str = "private key";
    let pem = read(WHAT, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            what: WHAT,
            path: path.to_path_buf(),
            expected: "PEM private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)",
        },
        e => TlsError::BadPem {
            what: WHAT,
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The active side's configuration while the CA is bootstrapped: our key
/// and certificate, and no check of the server's chain (`verify.rs`).
fn bootstrap_client(f: &TlsFiles) -> Result<Arc<ClientConfig>, TlsError> {
    let key = private_key(&f.private_key)?;
    let chain = certificates("certificate", &f.certificate)?;
    let key_pair = |e: rustls::Error| TlsError::KeyPair {
        key: f.private_key.clone(),
        cert: f.certificate.clone(),
        reason: e.to_string(),
    };
    let versions = [&rustls::version::TLS13, &rustls::version::TLS12];
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions)
        .map_err(key_pair)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Bootstrap(provider())))
        .with_client_auth_cert(chain, key)
        .map_err(key_pair)?;
    Ok(Arc::new(config))
}

fn build(f: &TlsFiles) -> Result<(Arc<ServerConfig>, Arc<ClientConfig>), TlsError> {
    let key = private_key(&f.private_key)?;
    let chain = certificates("certificate", &f.certificate)?;
    let cas = certificates("CA certificate", &f.ca_cert)?;
    let bad_ca = |reason: String| TlsError::BadCa {
        path: f.ca_cert.clone(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots.add(ca).map_err(|e| bad_ca(e.to_string()))?;
    }
    let roots = Arc::new(roots);
    let key_pair = |e: rustls::Error| TlsError::KeyPair {
        key: f.private_key.clone(),
        cert: f.certificate.clone(),
        reason: e.to_string(),
    };
    // OVS allows TLS 1.2 and later (stream-ssl's default "TLSv1.2+").
    let versions = [&rustls::version::TLS13, &rustls::version::TLS12];

    let client_verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| bad_ca(e.to_string()))?;
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions)
        .map_err(key_pair)?
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(key_pair)?;
    // No session tickets, as OVS (SSL_OP_NO_TICKET): nothing is resumed.
    server.send_tls13_tickets = 0;

    let server_verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| bad_ca(e.to_string()))?;
    let client = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions)
        .map_err(key_pair)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoHostnameCheck(server_verifier)))
        .with_client_auth_cert(chain, key)
        .map_err(key_pair)?;
    Ok((Arc::new(server), Arc::new(client)))
}
