//! `cursor-runner serve` as a separate process, for tests that kill the service or
//! control its environment.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{Client, TENANT, WAIT, connect, fake_agent, scenario};

/// How to start one service process.
pub struct ServiceSettings<'a> {
    /// The `cursor-runner` binary (`env!("CARGO_BIN_EXE_cursor-runner")` in its tests).
    pub binary: &'a Path,
    /// Set in the service's environment; empty: none is (the test names the store another
    /// way, e.g. `--database-url-file` in `args`).
    pub database_url: &'a str,
    pub state_dir: &'a Path,
    /// The fake agent's scenario file name under `fixtures/scenarios`.
    pub scenario: &'a str,
    /// Where the fake agent records what it reads.
    pub record: &'a Path,
    /// Extra environment of the service process itself.
    pub env: Vec<(String, String)>,
    /// Extra `serve` arguments.
    pub args: Vec<String>,
}

/// A running `cursor-runner serve` with its stderr watched. Its listeners take the ports
/// the kernel gives (port 0), read back from its `--ready-file`: a port a test picked as
/// free could be taken by another test's service before this one binds it.
pub struct ServiceProcess {
    pub child: Child,
    ready: ReadyFile,
    stderr_lines: mpsc::Receiver<String>,
}

/// Where the service says which addresses its listeners took, once they are bound.
struct ReadyFile {
    dir: tempfile::TempDir,
    listening: std::sync::OnceLock<Listening>,
}

/// `serve --ready-file`'s content.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
struct Listening {
    grpc: SocketAddr,
    metrics: Option<SocketAddr>,
    internal: Option<SocketAddr>,
}

impl ReadyFile {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            listening: std::sync::OnceLock::new(),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("ready.json")
    }

    /// What the file says, if the service wrote it yet.
    fn read(&self) -> Option<Listening> {
        if let Some(listening) = self.listening.get() {
            return Some(*listening);
        }
        let text = std::fs::read_to_string(self.path()).ok()?;
        let listening = serde_json::from_str(&text).expect("a whole ready file");
        Some(*self.listening.get_or_init(|| listening))
    }
}

impl ServiceProcess {
    pub fn start(settings: ServiceSettings<'_>) -> Self {
        Self::start_with(settings, |_| {})
    }

    /// [`Self::start`], with `prepare` applied to the command last (e.g. a `pre_exec`
    /// that narrows what the service may do).
    pub fn start_with(settings: ServiceSettings<'_>, prepare: impl FnOnce(&mut Command)) -> Self {
        let ready = ReadyFile::new();
        let agent = format!(
            "{} --scenario {} --record {}",
            fake_agent().display(),
            scenario(settings.scenario).display(),
            settings.record.display()
        );
        let mut command = Command::new(settings.binary);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--agent-command", &agent])
            .arg("--ready-file")
            .arg(ready.path())
            .arg("--state-dir")
            .arg(settings.state_dir)
            .args(&settings.args)
            .env_remove("CURSOR_RUNNER_DATABASE_URL")
            .env("CURSOR_RUNNER_LOG", "warn")
            .envs(settings.env)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if !settings.database_url.is_empty() {
            command.env("CURSOR_RUNNER_DATABASE_URL", settings.database_url);
        }
        prepare(&mut command);
        let mut child = command.spawn().expect("cursor-runner serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, stderr_lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self {
            child,
            ready,
            stderr_lines,
        }
    }

    /// What the ready file says, waiting up to `WAIT` for the service to write it.
    fn listening(&self) -> Listening {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(listening) = self.ready.read() {
                return listening;
            }
            self.assert_still_starting(deadline < std::time::Instant::now());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Fails, with what the service printed, once it has had `WAIT` to listen.
    fn assert_still_starting(&self, out_of_time: bool) {
        assert!(
            !out_of_time,
            "the service never listened (it wrote no {}); it printed:\n{}",
            self.ready.path().display(),
            self.stderr_lines.try_iter().collect::<Vec<_>>().join("\n")
        );
    }

    /// The gRPC listener's address (waiting until the service bound it).
    pub fn address(&self) -> SocketAddr {
        self.listening().grpc
    }

    /// The `/metrics` listener's address (the service was given `--metrics-listen`).
    pub fn metrics_address(&self) -> SocketAddr {
        self.listening().metrics.expect("the service serves /metrics")
    }

    /// The internal listener's address (the service was given `--internal-listen`).
    pub fn internal_address(&self) -> SocketAddr {
        self.listening().internal.expect("the service takes forwarded calls")
    }

    /// A client of the service, once it listens.
    pub async fn client(&self) -> Client {
        let deadline = tokio::time::Instant::now() + WAIT;
        let listening = loop {
            if let Some(listening) = self.ready.read() {
                break listening;
            }
            self.assert_still_starting(deadline < tokio::time::Instant::now());
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        connect(listening.grpc, Some(TENANT)).await
    }

    /// Waits until the service's stderr has a line containing `marker`.
    pub fn wait_for_stderr(&self, marker: &str) {
        let deadline = std::time::Instant::now() + WAIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) if line.contains(marker) => return,
                Ok(line) => seen.push(line),
                // What it printed instead is the first clue when a run fails.
                Err(_) => panic!("the service never printed `{marker}`; it printed:\n{}", seen.join("\n")),
            }
        }
    }

    /// SIGTERM, waits for the exit, and returns everything the service wrote to stderr
    /// (lines a `wait_for_stderr` already consumed are not repeated).
    pub fn stop_and_collect_stderr(mut self) -> Vec<String> {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
        let mut lines = Vec::new();
        // The reader thread ends at EOF, which follows the exit.
        while let Ok(line) = self.stderr_lines.recv_timeout(WAIT) {
            lines.push(line);
        }
        lines
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// SIGTERM (a graceful drain), then reap.
    pub fn stop(mut self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal);
    }

    /// Waits up to `WAIT` for the service to exit by itself; its exit status.
    pub async fn exit_status(&mut self) -> std::process::ExitStatus {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "the service never exited");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for ServiceProcess {
    /// A test that fails half-way must not leave its service running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl ServiceProcess {
    /// `binary` (the test's `env!("CARGO_BIN_EXE_cursor-runner")`) serving `database_url`
    /// from `dirs`, its agents scripted by `scenario`, with `env` added to its environment.
    pub fn serve_in(
        binary: &Path,
        database_url: &str,
        dirs: &ServiceDirs,
        scenario: &str,
        env: Vec<(String, String)>,
    ) -> Self {
        Self::start(ServiceSettings {
            binary,
            database_url,
            state_dir: dirs.root.path(),
            scenario,
            record: &dirs.record,
            env,
            args: Vec::new(),
        })
    }
}

/// The environment that makes `serve` replica `name` of a fleet, with an ownership lease
/// of `lease_ms`, as Kubernetes gives them.
pub fn replica_env(name: &str, lease_ms: u64) -> Vec<(String, String)> {
    vec![
        ("CURSOR_RUNNER_REPLICA_NAME".to_owned(), name.to_owned()),
        ("CURSOR_RUNNER_OWNERSHIP_LEASE_MS".to_owned(), lease_ms.to_string()),
    ]
}

/// [`replica_env`] for a replica that forwards calls to (and takes them from) the other
/// replicas sharing the fleet `token`: an internal listener, the token's file (written in
/// `dirs`), and `/metrics`, each on [`ANY_PORT`].
pub fn fleet_replica_env(name: &str, lease_ms: u64, dirs: &ServiceDirs, token: &str) -> Vec<(String, String)> {
    let token_file = dirs.root.path().join("fleet-token");
    std::fs::write(&token_file, format!("{token}\n")).expect("the fleet token");
    let mut env = replica_env(name, lease_ms);
    env.extend([
        ("CURSOR_RUNNER_INTERNAL_LISTEN".to_owned(), ANY_PORT.to_owned()),
        ("CURSOR_RUNNER_METRICS_LISTEN".to_owned(), ANY_PORT.to_owned()),
        (
            "CURSOR_RUNNER_FLEET_TOKEN_FILE".to_owned(),
            token_file.display().to_string(),
        ),
    ]);
    env
}

/// What to give a listener of a service this harness starts: the port the kernel gives,
/// read back through [`ServiceProcess::metrics_address`] and its kin.
pub const ANY_PORT: &str = "127.0.0.1:0";

/// A loopback address nothing listens on now (to find nobody there: a service this harness
/// starts binds port 0 and says which port it took).
pub fn free_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address")
}

/// A state directory with a workspace and a record file for one service.
pub struct ServiceDirs {
    pub root: tempfile::TempDir,
    pub workspace: PathBuf,
    pub record: PathBuf,
}

impl ServiceDirs {
    pub fn new() -> Self {
        let root = tempfile::tempdir().expect("temp dir");
        let workspace = root.path().join("workspace");
        std::fs::create_dir_all(&workspace).expect("workspace");
        let record = root.path().join("agent-stdin.ndjson");
        // As root, `serve` runs agents under their own uids: provisioned, and let in.
        if crate::agent_users::agent_users().is_some() {
            crate::agent_users::traversable(root.path());
            crate::agent_users::shared_with_agents(&workspace);
            crate::agent_users::appendable_by_agents(&record);
        }
        Self {
            root,
            workspace,
            record,
        }
    }
}

impl Default for ServiceDirs {
    fn default() -> Self {
        Self::new()
    }
}

/// What Prometheus asks for first: the `# TYPE` lines name families (a counter's without `_total`).
const OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0;q=0.9,text/plain;version=0.0.4;q=0.5";

/// A plain HTTP/1.1 GET of `path`, with an `Accept` header if given, waiting up to `WAIT`
/// for something to listen on `addr`; the response's head and body.
pub fn http_get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (String, String) {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + WAIT;
    let mut stream = loop {
        match std::net::TcpStream::connect(addr) {
            Ok(stream) => break stream,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "nothing listens on {addr}: {e}");
                std::thread::sleep(Duration::from_millis(25));
            }
        }
    };
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_owned(), body.to_owned())
}

/// `GET /metrics` from a service's `--metrics-listen` address, asking for OpenMetrics; the body.
pub fn scrape_metrics(addr: SocketAddr) -> String {
    let (head, body) = http_get(addr, "/metrics", Some(OPENMETRICS));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF");
    body
}
