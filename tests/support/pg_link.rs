//! A TCP link to PostgreSQL the test can cut: the store connects through it, and
//! [`Link::cut`] drops one of its connections, both ways at once, without a word from the
//! server — a connection lost in transit. The server side learns of it only when it next
//! writes, so a statement in flight still runs to its end. [`Link::swallow_replies`] drops
//! what the server sends on one before it is cut: a reply lost after its statement ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct Link {
    /// `url` with the server's address replaced by the link's.
    pub url: String,
    connections: Arc<Mutex<Vec<Carried>>>,
    accepting: AbortHandle,
}

/// One connection through the link: the port it has on the server's side (the server's
/// `client_port` for its session), its pumps, and whether the server's bytes still reach
/// the client.
struct Carried {
    server_side_port: u16,
    pumps: AbortHandle,
    replying: Arc<AtomicBool>,
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
                let replying = Arc::new(AtomicBool::new(true));
                let pumps = tokio::spawn(pump(client, upstream, replying.clone())).abort_handle();
                accepted.lock().unwrap().push(Carried {
                    server_side_port,
                    pumps,
                    replying,
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

    /// Drops the connection of the server's session `pid`, asking `admin` (a session of
    /// its own, not through the link) which of the link's connections carries it.
    pub async fn cut_the_session(&self, admin: &mut sqlx::PgConnection, pid: i32) {
        self.cut(client_port(admin, pid).await);
    }

    /// Drops the connection of the server's session whose `client_port` is `port`.
    pub fn cut(&self, port: u16) {
        let mut connections = self.connections.lock().unwrap();
        let at = Self::carrying(&connections, port);
        connections.remove(at).pumps.abort();
    }

    /// From now on, drops whatever the server's session `pid` sends its client (asking
    /// `admin`, as [`Link::cut_the_session`] does); the client still reaches the server.
    pub async fn swallow_replies(&self, admin: &mut sqlx::PgConnection, pid: i32) {
        let port = client_port(admin, pid).await;
        let connections = self.connections.lock().unwrap();
        connections[Self::carrying(&connections, port)]
            .replying
            .store(false, Ordering::SeqCst);
    }

    fn carrying(connections: &[Carried], port: u16) -> usize {
        connections
            .iter()
            .position(|carried| carried.server_side_port == port)
            .expect("a connection through the link from that port")
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accepting.abort();
        for carried in self.connections.lock().unwrap().drain(..) {
            carried.pumps.abort();
        }
    }
}

/// The `client_port` of the server's session `pid`.
async fn client_port(admin: &mut sqlx::PgConnection, pid: i32) -> u16 {
    let (port,): (i32,) = sqlx::query_as("SELECT client_port FROM pg_stat_activity WHERE pid = $1")
        .bind(pid)
        .fetch_one(admin)
        .await
        .unwrap();
    u16::try_from(port).unwrap()
}

/// Carries bytes both ways until either side closes; the server's only while `replying`.
async fn pump(client: TcpStream, upstream: TcpStream, replying: Arc<AtomicBool>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = upstream.into_split();
    let replies = async {
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let read = match from_server.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            if replying.load(Ordering::SeqCst) && to_client.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
        () = replies => {}
    }
}

/// The pid of the backend running a statement like `query` that waits on a lock.
pub async fn wait_for_a_statement_waiting_on_a_lock(admin: &mut sqlx::PgConnection, query: &str) -> i32 {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let waiting: Option<(i32,)> = sqlx::query_as(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE $1",
        )
        .bind(query)
        .fetch_optional(&mut *admin)
        .await
        .unwrap();
        match waiting {
            Some((pid,)) => return pid,
            None if std::time::Instant::now() < give_up => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await
            }
            None => panic!("no statement like {query} waited on a lock"),
        }
    }
}
