//! A TCP link to PostgreSQL the test can cut: the store connects through it, and
//! [`Link::cut`] drops one of its connections, both ways at once, without a word from the
//! server — a connection lost in transit. The server side learns of it only when it next
//! writes, so a statement in flight still runs to its end.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct Link {
    /// `url` with the server's address replaced by the link's.
    pub url: String,
    connections: Arc<Mutex<Vec<Carried>>>,
    accepting: AbortHandle,
}

/// One connection through the link: the port it has on the server's side (the server's
/// `client_port` for its session), and its pumps.
struct Carried {
    server_side_port: u16,
    pumps: AbortHandle,
}

impl Link {
    /// A link to the server of `url` (`postgres://user@host:port/database`).
    pub async fn to(url: &str) -> Self {
        let (scheme_and_user, rest) = url.rsplit_once('@').expect("a URL with a user");
        let (server, database) = rest.split_once('/').expect("a URL with a database");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let link_url = format!("{scheme_and_user}@{}/{database}", listener.local_addr().unwrap());
        let connections = Arc::new(Mutex::new(Vec::new()));
        let server = server.to_owned();
        let accepted = connections.clone();
        let accepting = tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let upstream = TcpStream::connect(&server).await.unwrap();
                let server_side_port = upstream.local_addr().unwrap().port();
                let pumps = tokio::spawn(pump(client, upstream)).abort_handle();
                accepted.lock().push(Carried {
                    server_side_port,
                    pumps,
                });
            }
        })
        .abort_handle();
        Self {
            url: link_url,
            connections,
            accepting,
        }
    }

    /// Drops the connection of the server's session whose `client_port` is `port`.
    pub fn cut(&self, port: u16) {
        let mut connections = self.connections.lock();
        let at = connections
            .iter()
            .position(|carried| carried.server_side_port == port)
            .expect("a connection through the link from that port");
        connections.remove(at).pumps.abort();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accepting.abort();
        for carried in self.connections.lock().drain(..) {
            carried.pumps.abort();
        }
    }
}

/// Carries bytes both ways until either side closes.
async fn pump(client: TcpStream, upstream: TcpStream) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = upstream.into_split();
    tokio::select! {
        _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
        _ = tokio::io::copy(&mut from_server, &mut to_client) => {}
    }
}
