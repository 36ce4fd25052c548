//! A TCP link to PostgreSQL the test can cut: the store connects through it, and
//! [`Link::cut_the_latest`] drops the connection that last carried the store's bytes, both
//! ways at once, without a word from the server — a connection lost in transit. The server
//! side learns of it only when it next writes, so a statement in flight still runs to its end.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct Link {
    /// `url` with the server's address replaced by the link's.
    pub url: String,
    connections: Arc<Mutex<Vec<Carried>>>,
    accepting: AbortHandle,
}

/// One connection through the link: when the store last sent on it, and its pumps.
struct Carried {
    last_sent: Arc<Mutex<Instant>>,
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
                let last_sent = Arc::new(Mutex::new(Instant::now()));
                let pumps = tokio::spawn(pump(client, upstream, last_sent.clone())).abort_handle();
                accepted.lock().push(Carried { last_sent, pumps });
            }
        })
        .abort_handle();
        Self {
            url: link_url,
            connections,
            accepting,
        }
    }

    /// Drops the connection that last carried the store's bytes.
    pub fn cut_the_latest(&self) {
        let mut connections = self.connections.lock();
        let latest = (0..connections.len())
            .max_by_key(|&i| *connections[i].last_sent.lock())
            .expect("a connection through the link");
        connections.remove(latest).pumps.abort();
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

/// Carries bytes both ways until either side closes, noting when the client last sent.
async fn pump(client: TcpStream, upstream: TcpStream, last_sent: Arc<Mutex<Instant>>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = upstream.into_split();
    let sending = async {
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from_client.read(&mut buf).await {
            *last_sent.lock() = Instant::now();
            if to_server.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let receiving = async {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    };
    tokio::select! {
        () = sending => {}
        () = receiving => {}
    }
}
