//! The listener: TLS (rustls, ring) with certificate and key read from files and reloaded
//! when they change, optional client certificates verified against a CA, and the
//! connection information the authentication layer reads (peer address, the digest of a
//! verified client certificate).
//!
//! Hand-rolled rather than tonic's `ServerTlsConfig` because that one is fixed at start:
//! certificates must rotate without a restart, and one slow handshake must not hold up
//! the accept loop.

use parking_lot::Mutex;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use cursor_runner_executions::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

/// A TLS handshake slower than this is dropped.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections accepted but not yet handed to the server.
const ACCEPT_BACKLOG: usize = 64;

/// Where the listener's certificate, key and (optionally) client CA live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Client certificates presented are verified against this CA; a verified one can
    /// stand for a tenant (`client_cert_sha256` in the tokens file).
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

type Stamp = Vec<Option<(SystemTime, u64, u64)>>;

/// The server's TLS configuration, rebuilt when one of its files changes.
pub struct TlsReloader {
    settings: TlsSettings,
    current: Mutex<(Stamp, Arc<ServerConfig>)>,
}

impl TlsReloader {
    /// Reads and checks every file now: a broken configuration refuses to start.
    pub fn new(settings: TlsSettings) -> Result<Self, TlsError> {
        let stamp = stamp(&settings);
        let config = build(&settings)?;
        Ok(Self {
            settings,
            current: Mutex::new((stamp, config)),
        })
    }

    /// The acceptor for the next connection, reloaded first if a file changed. A reload
    /// that fails keeps the last good configuration (and says so) rather than refusing
    /// every client.
    pub fn acceptor(&self) -> TlsAcceptor {
        let mut current = self.current.lock();
        let now = stamp(&self.settings);
        if now != current.0 {
            match build(&self.settings) {
                Ok(config) => {
                    tracing::info!("TLS certificate reloaded");
                    *current = (now, config);
                }
                Err(e) => {
                    tracing::error!(error = %e, "reloading the TLS files failed; keeping the previous certificate");
                    current.0 = now;
                }
            }
        }
        TlsAcceptor::from(current.1.clone())
    }
}

fn stamp(settings: &TlsSettings) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    [Some(&settings.cert), Some(&settings.key), settings.client_ca.as_ref()]
        .into_iter()
        .flatten()
        .map(|path| {
            std::fs::metadata(path)
                .ok()
                .and_then(|m| m.modified().ok().map(|t| (t, m.len(), m.ino())))
        })
        .collect()
}

fn build(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let error = |what: &str, e: &dyn std::fmt::Display| TlsError(format!("{what}: {e}"));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&settings.cert)
        .and_then(Iterator::collect)
        .map_err(|e| error(&format!("reading {}", settings.cert.display()), &e))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{} holds no certificate", settings.cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(&settings.key)
        .map_err(|e| error(&format!("reading {}", settings.key.display()), &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| error("protocol versions", &e))?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in
                CertificateDer::pem_file_iter(ca).map_err(|e| error(&format!("reading {}", ca.display()), &e))?
            {
                let cert = cert.map_err(|e| error(&format!("reading {}", ca.display()), &e))?;
                roots.add(cert).map_err(|e| error("a client CA certificate", &e))?;
            }
            // Optional: a client may authenticate with a bearer token instead.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| error("the client CA", &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| error("the certificate and key", &e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What the authentication layer learns about a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionInfo {
    pub remote: Option<SocketAddr>,
    /// SHA-256 of the DER of the client certificate the TLS handshake verified.
    pub client_cert_sha256: Option<[u8; 32]>,
}

/// One accepted connection, plain or TLS.
pub enum Connection {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl tonic::transport::server::Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        match self {
            Self::Plain(stream) => ConnectionInfo {
                remote: stream.peer_addr().ok(),
                client_cert_sha256: None,
            },
            Self::Tls(stream) => {
                let (tcp, session) = stream.get_ref();
                ConnectionInfo {
                    remote: tcp.peer_addr().ok(),
                    client_cert_sha256: session
                        .peer_certificates()
                        .and_then(|certs| certs.first())
                        .map(|leaf| Sha256::digest(leaf.as_ref()).into()),
                }
            }
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Accepts connections on `listener`; with TLS, each handshake runs on its own task
/// (bounded by [`TLS_HANDSHAKE_TIMEOUT`]) and only finished ones reach the server.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<TlsReloader>>,
    engine: Arc<Engine>,
) -> ReceiverStream<io::Result<Connection>> {
    let (tx, rx) = tokio::sync::mpsc::channel(ACCEPT_BACKLOG);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let (connections, tls, engine) = (tx.clone(), tls.clone(), engine.clone());
            tokio::spawn(async move {
                if from_an_agent(&engine, &stream, peer).await {
                    return;
                }
                match tls {
                    None => {
                        let _ = connections.send(Ok(Connection::Plain(stream))).await;
                    }
                    Some(tls) => match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream)).await
                    {
                        Ok(Ok(stream)) => {
                            let _ = connections.send(Ok(Connection::Tls(Box::new(stream)))).await;
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    },
                }
            });
            if tx.is_closed() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// Whether one of this host's agents opened the connection: it is then closed unread, so an
/// agent can never answer its own permission requests or act as a tenant.
async fn from_an_agent(engine: &Arc<Engine>, stream: &TcpStream, peer: SocketAddr) -> bool {
    let Ok(local) = stream.local_addr() else {
        return false;
    };
    let engine = engine.clone();
    let agent = tokio::task::spawn_blocking(move || engine.agent_behind(peer, local))
        .await
        .ok()
        .flatten();
    if let Some(agent) = &agent {
        tracing::warn!(%peer, uid = agent.uid, pid = agent.pid, "refused a connection from an agent to the service's API");
    }
    agent.is_some()
}
